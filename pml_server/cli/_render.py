"""Rich rendering of API replies for the `pml` CLI.

Every listing fits the width it is given (the terminal, $COLUMNS, or 80 in a pipe): a table when
the table fits without squeezing a column, otherwise a stacked form, one block per row with a
label per value, that wraps at any width. Empty answers are said in words."""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Callable, Sequence
from typing import TypeVar

from google.protobuf import timestamp_pb2
from google.protobuf.message import Message
from pml_client import pml_pb2, resources_pb2
from rich.cells import cell_len, chop_cells
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from pml_server.domain.caution import cautions

# Control characters but newline and tab: shown escaped (`\x1b`), never written to the terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10)}


_M = TypeVar("_M", bound=Message)


def one_line(text: str) -> str:
    """`text` escaped for a listing of one item a line: no control character, newline and tab
    included."""
    return text.translate(_CONTROL).replace("\n", "\\n").replace("\t", "\\t")


def printable(message: _M) -> _M:
    """A copy of `message` whose text fields hold no control character (but newline and tab):
    a tool name, an intent or a key in the code is an agent's input, and an escape sequence in
    it would rewrite the operator's terminal. `--json` output escapes them itself."""
    out = type(message)()
    out.CopyFrom(message)
    _clean(out)
    return out


def _clean(message: Message) -> None:
    for field, value in message.ListFields():
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                continue  # no map in the replies the CLI renders
            for item in value if field.is_repeated else (value,):
                _clean(item)
        elif field.type == field.TYPE_STRING:
            if field.is_repeated:
                value[:] = [v.translate(_CONTROL) for v in value]
            else:
                setattr(message, field.name, value.translate(_CONTROL))


def _when(ts: timestamp_pb2.Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return dt.datetime.fromtimestamp(ts.seconds, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _short(name: str) -> str:
    return name.split("/", 1)[-1]


def _rate(success: int, usage: int) -> str:
    return f"{100 * success / usage:.0f}% of {usage}" if usage else "-"


def _fits(console: Console, table: Table) -> bool:
    # Measured as if the screen were unbounded: the width the table needs with no column
    # squeezed (a measure at the console's own width is clamped to it).
    natural = Measurement.get(console, console.options.update_width(100_000), table)
    return natural.maximum <= console.width


def _listing(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[str] = (),
) -> None:
    """A table when it fits; else each row as a block headed by its first value."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*row)
    if _fits(console, table):
        console.print(table)
        return
    console.print(Text(title, style="italic"))
    for row in rows:
        _block(console, Text(row[0], style="bold"), list(zip(columns[1:], row[1:], strict=True)))


def _wrap(value: str, room: int) -> list[str]:
    """`value` in lines of at most `room` terminal cells: a wide character (CJK, most emoji)
    takes two, where textwrap counts one a character, so an intent in Japanese went past the
    width (docs/cli.md, Output fits the width it gets)."""
    lines = textwrap.wrap(value, room, break_long_words=True, break_on_hyphens=False) or [""]
    if all(cell_len(line) <= room for line in lines):
        return lines
    lines, line = [], ""
    for word in value.split():
        for piece in chop_cells(word, room):
            joined = f"{line} {piece}" if line else piece
            if cell_len(joined) <= room:
                line = joined
            else:
                lines.append(line)
                line = piece
    return [*lines, line] if line else lines or [""]


def _block(console: Console, heading: Text, fields: list[tuple[str, str]]) -> None:
    """A heading, then `label  value` lines indented under it; long values wrap under
    themselves. Built line by line, so no line carries padding to the right."""
    console.print(heading)
    label_width = max((len(label) for label, _ in fields), default=0)
    indent = " " * (2 + label_width + 2)
    room = max(20, console.width - len(indent))
    for label, value in fields:
        lines = _wrap(value, room)
        first = Text.assemble("  ", (label.ljust(label_width), "dim"), "  ", lines[0])
        console.print(first, soft_wrap=True)
        for line in lines[1:]:
            console.print(Text(indent + line), soft_wrap=True)


_EnumValue = TypeVar("_EnumValue", bound=int)


def enum_label(name_of: Callable[[_EnumValue], str], value: _EnumValue, prefix: str) -> str:
    """`value`'s name (`name_of`: an enum's `Name`) without `prefix`; a value a newer server
    added, which this build has no name for, as its number (`Name` raised ValueError: the
    command died after the server had done what it asked)."""
    try:
        return name_of(value).removeprefix(prefix)
    except ValueError:
        return str(value)


def capture(console: Console, result: resources_pb2.CaptureResult) -> None:
    outcome = enum_label(resources_pb2.CaptureOutcome.Name, result.outcome, "CAPTURE_OUTCOME_")
    style = {"SAVED": "green", "COUNTED": "cyan", "REJECTED": "red"}.get(outcome, "")
    console.print(Text(outcome.lower(), style=style), end="")  # "[]7[/]" was a MarkupError
    if result.pattern:
        console.print(f"  pattern {_short(result.pattern)}  capability {_short(result.capability)}")
    else:
        console.print()
    if result.replayed:
        console.print("(replayed: this request id was already applied; nothing counted twice)")
    if result.tool_mismatch:
        console.print("[yellow]the code's tool calls disagree with the recorded ones[/]")
    for f in result.tool_failures:
        console.print(f"  [red]tool failed[/] {f.tool}: {f.error}")


_SCORE_COLUMNS = (
    "match", "semantic", "lexical", "est.", "reliab.", "steps", "usage", "recency", "superseded",
    "next",
)  # fmt: skip


def _score_values(sc: resources_pb2.ScoreParts) -> list[str]:
    parts = (
        sc.match, sc.semantic, sc.lexical, sc.success_estimate, sc.reliability, sc.steps,
        sc.usage, sc.recency,
    )  # fmt: skip
    # `next`: the session signal (docs/ranking.md, Sessions); proto3 reads 0 from an older server
    return [f"{v:.2f}" for v in (*parts, sc.superseded_penalty, sc.transition or 1.0)]


def _cautions(intent: str | None, s: resources_pb2.Suggestion) -> list[str]:
    if intent is None:
        return []
    return [c.reason for c in cautions(intent, s.pattern.tools_used, s.score.match)]


def suggestions(
    console: Console,
    reply: pml_pb2.SuggestResponse,
    explain: bool = False,
    intent: str | None = None,
    no_tools: bool = False,
) -> None:
    """`intent`: the request, for each suggestion's cautions (docs/ranking.md, Weak
    matches); `no_tools`: the request's `available_tools` was an empty list (`--tools ""`)."""
    if not reply.suggestions:
        console.print(f"no suggestions: {_why_none(reply, explain, intent, no_tools)}")
    else:
        if reply.read_as_follow_up:
            console.print(
                "[dim]the request said too little alone: read with the previous step "
                "(docs/ranking.md, Sessions, Follow-up requests)[/]",
                highlight=False,
            )
        _suggestion_listing(console, reply, intent)
    if explain:
        _filtered(console, reply)
    if reply.suggestions:
        console.print("[dim]template of the best suggestion:[/]")
        console.print(reply.suggestions[0].pattern.template, markup=False, highlight=False)
    _plans(console, reply, explain)


def _why_none(
    reply: pml_pb2.SuggestResponse,
    explain: bool,
    intent: str | None,
    no_tools: bool,
) -> str:
    """Why a Suggest answered no suggestion, as far as the request and the reply tell."""
    if reply.filtered:
        removal = "the filters removed every candidate (listed below)"
    elif removed := reply.removed_by_filters:
        missing = f"; they need {', '.join(reply.missing_tools)}" if reply.missing_tools else ""
        removal = (
            f"{removed} {'capability matches' if removed == 1 else 'capabilities match'} "
            f"this intent well enough, but the filters removed them{missing} (--explain "
            "says which rule removed each)"
        )
    else:
        removal = ""
    if no_tools:
        # an empty `available_tools`: no tool is reachable, so only patterns without tools pass
        # (docs/ranking.md, Context filters), however well the others match
        head = "--tools named no tool, so only patterns that use none can be suggested"
        if removal:
            return f"{head}: {removal}"
        return f"{head}, and none of those " + (
            "ever followed that step" if not intent else "matches this intent well enough"
        )
    if removal:
        return removal
    if not intent:
        # no intent: what usually comes next (docs/ranking.md, Sessions)
        return "nothing recorded ever followed that step"
    return "nothing stored matches this intent well enough" + (
        "" if explain else " (--explain shows what the filters removed)"
    )


def _plans(console: Console, reply: pml_pb2.SuggestResponse, explain: bool) -> None:
    """Plans after the suggestions, one block each (wrapped to the console's width)."""
    if not reply.plans:
        return
    console.print(
        Text("Plans: several capabilities that together cover the request", style="italic")
    )
    for rank, plan in enumerate(reply.plans, 1):
        sc = plan.score
        heading = Text.assemble((f"{rank}. ", "bold"), (" > ".join(plan.tools), "bold"))
        heading.append(f"  total {sc.total:.3f}")
        fields = []
        for n, part in enumerate(plan.parts):
            tools = " > ".join(part.suggestion.pattern.tools_used[s] for s in part.steps)
            covers = "; ".join(f'"{c}"' for c in part.covers)
            fields.append(
                (f"part {n + 1}", f"{_short(part.suggestion.capability)} ({tools}) for {covers}")
            )
        for link in plan.links:
            fields.append(
                ("link", f"part {link.from_part + 1} {link.output} -> "
                         f"part {link.to_part + 1} {link.input}")
            )  # fmt: skip
        if explain:
            matches = " ".join(f"{m:.2f}" for m in sc.part_match)
            rels = " ".join(f"{r:.2f}" for r in sc.part_reliability)
            fields.append(
                ("score", f"coverage {sc.coverage:.2f}  match {matches}  reliability {rels}  "
                          f"extra parts -{sc.extra_part_cost:.2f}  unlinked inputs "
                          f"{sc.unlinked_inputs} -{sc.unlinked_input_cost:.2f}  "
                          f"best single {sc.best_single:.3f}")
            )  # fmt: skip
        _block(console, heading, fields)


# The score parts a narrower table leaves out, first to last: the least telling first; `match`
# (how well the intent matches) and `total` stay. When even that table does not fit, the
# stacked form shows every part.
_DROPPED_FIRST = (
    "superseded", "recency", "usage", "steps", "reliab.", "lexical", "semantic", "est.",
)  # fmt: skip


def _suggestion_table(
    title: str, reply: pml_pb2.SuggestResponse, left_out: Sequence[str], marked: set[int]
) -> Table:
    table = Table(title=title)
    kept = [c for c in _SCORE_COLUMNS if c not in left_out]
    for column in ("#", "capability", "pattern", "tools", "success", *kept, "total"):
        text = column in ("capability", "pattern", "tools")
        # Ids stay whole (they are what `pml show` takes); the tools column wraps instead.
        table.add_column(
            column, justify="left" if text else "right", no_wrap=column in ("capability", "pattern")
        )
    for rank, s in enumerate(reply.suggestions, 1):
        p, sc = s.pattern, s.score
        values = dict(zip(_SCORE_COLUMNS, _score_values(sc), strict=True))
        table.add_row(
            f"{rank}!" if rank in marked else str(rank),
            _short(s.capability),
            _short(p.name),
            " > ".join(p.tools_used),
            _rate(p.success_count, p.usage_count),
            *(values[c] for c in kept),
            f"[bold]{sc.total:.3f}[/]",
        )
    return table


def _suggestion_listing(
    console: Console, reply: pml_pb2.SuggestResponse, intent: str | None
) -> None:
    title = "Suggestions, best first (total: the ranking formula over the parts)"
    notes = {rank: _cautions(intent, s) for rank, s in enumerate(reply.suggestions, 1)}
    marked = {rank for rank, said in notes.items() if said}
    # `next`, the session signal, only when the request named a previous step (it is 1 else;
    # an older server sends 0): docs/ranking.md, Sessions
    with_context = any(s.score.transition not in (0.0, 1.0) for s in reply.suggestions)
    unshown = () if with_context else ("next",)
    for n in range(len(_DROPPED_FIRST) + 1):
        left_out = _DROPPED_FIRST[:n]
        table = _suggestion_table(title, reply, (*unshown, *left_out), marked)
        if _fits(console, table):
            console.print(table)
            for rank in sorted(marked):
                for reason in notes[rank]:
                    console.print(f"{rank}! {reason}", markup=False, highlight=False)
            if left_out:
                console.print(
                    f"[dim]left out at this width: {', '.join(left_out)} "
                    "(a wider terminal or --json shows every part)[/]",
                    highlight=False,
                )
            return
    console.print(Text(title, style="italic"))
    for rank, s in enumerate(reply.suggestions, 1):
        p, sc = s.pattern, s.score
        parts = "  ".join(
            f"{name} {value}"
            for name, value in zip(_SCORE_COLUMNS, _score_values(sc), strict=True)
            if name not in unshown
        )
        heading = Text.assemble((f"{rank}. ", "bold"), (_short(s.capability), "bold"))
        heading.append(f"  total {sc.total:.3f}")
        _block(
            console,
            heading,
            [
                ("pattern", _short(p.name)),
                ("tools", " > ".join(p.tools_used)),
                ("success", _rate(p.success_count, p.usage_count)),
                ("parts", parts),
                *(("caution", reason) for reason in notes[rank]),
            ],
        )


def _filtered(console: Console, reply: pml_pb2.SuggestResponse) -> None:
    if not reply.filtered:
        console.print("nothing filtered: no candidate was removed by a filter")
        return
    rows = [(_short(f.capability), _short(f.pattern), f.rule, f.detail) for f in reply.filtered]
    _listing(console, "Filtered out (explain)", ("capability", "pattern", "rule", "detail"), rows)


def patterns(console: Console, items: list[resources_pb2.Pattern]) -> None:
    if not items:
        console.print("no patterns stored yet (`pml record` or `pml import` adds some)")
        return
    rows = [
        (
            _short(p.name),
            _short(p.capability),
            " > ".join(p.tools_used),
            _rate(p.success_count, p.usage_count),
            _when(p.last_used_time),
            "; ".join(i.text for i in p.intents[:3]),
        )
        for p in items
    ]
    columns = ("pattern", "capability", "tools", "success", "last used", "intents")
    _listing(console, f"Patterns ({len(items)})", columns, rows)


def capabilities(console: Console, items: list[resources_pb2.Capability]) -> None:
    if not items:
        console.print("no capabilities stored yet (`pml record` or `pml import` adds some)")
        return
    rows = [
        (
            _short(c.name),
            " > ".join(c.tools),
            str(c.pattern_count),
            _rate(c.success_count, c.usage_count),
            _when(c.last_used_time),
            "; ".join(c.intents[:3]),
        )
        for c in items
    ]
    columns = ("capability", "tools", "patterns", "success", "last used", "intents")
    _listing(console, f"Capabilities ({len(items)})", columns, rows)


def _detail_table(title: str) -> Table:
    """Two columns, label and value; a long value without spaces (a hash, a JSON schema) folds
    onto the next lines instead of being cut with an ellipsis."""
    table = Table(show_header=False, title=title)
    table.add_column("label", no_wrap=True)
    table.add_column("value", overflow="fold")
    return table


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def pattern_detail(console: Console, p: resources_pb2.Pattern) -> None:
    table = _detail_table(p.name)
    rows = [
        ("capability", p.capability),
        ("language", p.language),
        ("tools", " > ".join(p.tools_used)),
        ("code hash", p.code_hash),
        ("usage", str(p.usage_count)),
        ("success", _rate(p.success_count, p.usage_count)),
        ("failures", str(p.failure_count)),
        ("first seen", _when(p.create_time)),
        ("last used", _when(p.last_used_time)),
        ("mean duration", f"{p.mean_duration_ms:.1f} ms"),
        ("flagged for removal", _yes_no(p.flagged_for_removal)),
        ("superseded by", p.superseded_by or "-"),
        ("parameter schema", p.parameter_schema_json),
    ]
    for key, value in rows:
        table.add_row(key, value)
    for i in p.intents:
        table.add_row("intent", f"{i.text} (x{i.hit_count})")
    if len(p.intents) < p.intent_count:  # GetPattern's answer holds those that fit
        table.add_row("intents", f"{len(p.intents)} of {p.intent_count} shown (most hits first)")
    for param in p.parameters:
        table.add_row(f"param {param.name}", ", ".join(param.recent_values_json[:5]))
    for step in p.steps:
        table.add_row(f"step {step.index}", step_text(step))
    if p.truncated:  # what did not fit the answer (docs/api.md, "Answer sizes")
        table.add_row(
            "truncated",
            "yes: the answer left out what did not fit (intents, recent values, steps; "
            "docs/api.md, Answer sizes)",
        )
    console.print(table)
    console.print(p.template, markup=False, highlight=False)


_KIND_SHOWN = {
    resources_pb2.StepArgument.KIND_LITERAL: "literal",
    resources_pb2.StepArgument.KIND_UNKNOWN: "?",
}


def step_text(step: resources_pb2.Step) -> str:
    """`tool(key=$PARAM, id=#0.field) <- 0`: each argument's source (`#n` is step n's output),
    then the steps it reads; `independent` when it reads none (docs/normalization.md, Steps)."""
    args = []
    for a in step.arguments:
        if a.kind == resources_pb2.StepArgument.KIND_REFERENCE:
            value = " + ".join(f"#{x.step}{x.path}" for x in a.sources)
        elif a.kind == resources_pb2.StepArgument.KIND_PARAMETER:
            value = " + ".join(a.parameters)
        else:
            value = _KIND_SHOWN.get(a.kind, "?")
        args.append(f"{a.name}={value}")
    flow = (
        f" <- {', '.join(str(d) for d in step.depends_on)}" if step.depends_on else " independent"
    )
    unread = "" if step.flow_known else " (flow not readable: loop, callback or unparsed)"
    return f"{step.tool}({', '.join(args)}){flow}{unread}"


def capability_detail(console: Console, c: resources_pb2.Capability) -> None:
    table = _detail_table(c.name)
    table.add_row("tools", " > ".join(c.tools))
    table.add_row("best pattern", c.best_pattern)
    shown = "\n".join(c.patterns)
    if c.pattern_count > len(c.patterns):  # the best ones: `pml list --capability` lists all
        shown += f"\n... {c.pattern_count} in all (pml list --capability {c.name})"
    table.add_row("patterns", shown)
    table.add_row("success", _rate(c.success_count, c.usage_count))
    table.add_row("last used", _when(c.last_used_time))
    table.add_row("intents", "\n".join(c.intents))
    console.print(table)


def failures(console: Console, items: list[resources_pb2.Failure]) -> None:
    if not items:
        console.print("no failures logged")
        return
    rows = [
        (_when(f.time), f.tool, f.error, f.intent, _short(f.pattern) or "-", f.request_id)
        for f in items
    ]
    columns = ("time", "tool", "error", "intent", "pattern", "request id")
    _listing(console, f"Failures ({len(items)}, newest first)", columns, rows)


def retention(console: Console, reply: pml_pb2.RunRetentionResponse) -> None:
    title = "Retention (dry run: nothing changed)" if reply.dry_run else "Retention (applied)"
    if not reply.entries:
        console.print(f"{title}: nothing to flag, supersede or remove")
        return
    rows = []
    for e in reply.entries:
        action = enum_label(resources_pb2.RetentionAction.Name, e.action, "RETENTION_ACTION_")
        rows.append((_short(e.pattern), action.lower(), e.reason, _short(e.superseded_by) or "-"))
    _listing(console, title, ("pattern", "action", "reason", "superseded by"), rows)
    if reply.truncated:  # the answer lists the first actions only (proto: RunRetentionResponse)
        listed = f"Listed {len(reply.entries)} of {reply.total_actions} actions"
        done = "" if reply.dry_run else f"; all {reply.total_actions} were applied"
        console.print(f"{listed} (the answer is cut){done}.")


def stats(console: Console, s: pml_pb2.GetStatsResponse) -> None:
    table = Table(title="Stats", show_header=False)
    for key in ("patterns", "capabilities", "intents", "executions", "rejected", "failures_logged"):
        table.add_row(key.replace("_", " "), str(getattr(s, key)))
    console.print(table)
