"""Rich rendering of API replies for the `pml` CLI."""

from __future__ import annotations

import datetime as dt

from google.protobuf import timestamp_pb2
from rich.console import Console
from rich.table import Table

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2


def _when(ts: timestamp_pb2.Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return dt.datetime.fromtimestamp(ts.seconds, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _short(name: str) -> str:
    return name.split("/", 1)[-1]


def _rate(success: int, usage: int) -> str:
    return f"{100 * success / usage:.0f}% of {usage}" if usage else "-"


def capture(console: Console, result: resources_pb2.CaptureResult) -> None:
    outcome = resources_pb2.CaptureOutcome.Name(result.outcome).removeprefix("CAPTURE_OUTCOME_")
    style = {"SAVED": "green", "COUNTED": "cyan", "REJECTED": "red"}.get(outcome, "")
    console.print(f"[{style}]{outcome.lower()}[/]", end="")
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


def suggestions(console: Console, reply: pml_pb2.SuggestResponse) -> None:
    table = Table(title="Suggestions, best first (total: the ranking formula over the parts)")
    for column in (
        "#",
        "capability",
        "pattern",
        "tools",
        "success",
        "match",
        "semantic",
        "lexical",
        "est.",
        "reliab.",
        "usage",
        "recency",
        "superseded",
        "total",
    ):
        text = column in ("capability", "pattern", "tools")
        # Ids stay whole (they are what `pml show` takes); the tools column wraps instead.
        table.add_column(
            column, justify="left" if text else "right", no_wrap=column in ("capability", "pattern")
        )
    for rank, s in enumerate(reply.suggestions, 1):
        p, sc = s.pattern, s.score
        table.add_row(
            str(rank),
            _short(s.capability),
            _short(p.name),
            " > ".join(p.tools_used),
            _rate(p.success_count, p.usage_count),
            f"{sc.match:.2f}",
            f"{sc.semantic:.2f}",
            f"{sc.lexical:.2f}",
            f"{sc.success_estimate:.2f}",
            f"{sc.reliability:.2f}",
            f"{sc.usage:.2f}",
            f"{sc.recency:.2f}",
            f"{sc.superseded_penalty:.2f}",
            f"[bold]{sc.total:.3f}[/]",
        )
    console.print(table)
    if reply.filtered:
        out = Table(title="Filtered out (explain)")
        for column in ("capability", "pattern", "rule", "detail"):
            out.add_column(column)
        for f in reply.filtered:
            out.add_row(_short(f.capability), _short(f.pattern), f.rule, f.detail)
        console.print(out)
    if reply.suggestions:
        console.print("[dim]template of the best suggestion:[/]")
        console.print(reply.suggestions[0].pattern.template, markup=False, highlight=False)


def patterns(console: Console, items: list[resources_pb2.Pattern]) -> None:
    table = Table(title=f"Patterns ({len(items)})")
    for column in ("pattern", "capability", "tools", "success", "last used", "intents"):
        table.add_column(column)
    for p in items:
        table.add_row(
            _short(p.name),
            _short(p.capability),
            " > ".join(p.tools_used),
            _rate(p.success_count, p.usage_count),
            _when(p.last_used_time),
            "; ".join(i.text for i in p.intents[:3]),
        )
    console.print(table)


def capabilities(console: Console, items: list[resources_pb2.Capability]) -> None:
    table = Table(title=f"Capabilities ({len(items)})")
    for column in ("capability", "tools", "patterns", "success", "last used", "intents"):
        table.add_column(column)
    for c in items:
        table.add_row(
            _short(c.name),
            " > ".join(c.tools),
            str(len(c.patterns)),
            _rate(c.success_count, c.usage_count),
            _when(c.last_used_time),
            "; ".join(c.intents[:3]),
        )
    console.print(table)


def pattern_detail(console: Console, p: resources_pb2.Pattern) -> None:
    table = Table(show_header=False, title=p.name)
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
        ("flagged for removal", str(p.flagged_for_removal)),
        ("superseded by", p.superseded_by or "-"),
        ("parameter schema", p.parameter_schema_json),
    ]
    for key, value in rows:
        table.add_row(key, value)
    for i in p.intents:
        table.add_row("intent", f"{i.text} (x{i.hit_count})")
    for param in p.parameters:
        table.add_row(f"param {param.name}", ", ".join(param.recent_values_json[:5]))
    console.print(table)
    console.print(p.template, markup=False, highlight=False)


def capability_detail(console: Console, c: resources_pb2.Capability) -> None:
    table = Table(show_header=False, title=c.name)
    table.add_row("tools", " > ".join(c.tools))
    table.add_row("best pattern", c.best_pattern)
    table.add_row("patterns", "\n".join(c.patterns))
    table.add_row("success", _rate(c.success_count, c.usage_count))
    table.add_row("last used", _when(c.last_used_time))
    table.add_row("intents", "\n".join(c.intents))
    console.print(table)


def failures(console: Console, items: list[resources_pb2.Failure]) -> None:
    table = Table(title=f"Failures ({len(items)}, newest first)")
    for column in ("time", "tool", "error", "intent", "pattern", "request id"):
        table.add_column(column)
    for f in items:
        table.add_row(
            _when(f.time), f.tool, f.error, f.intent, _short(f.pattern) or "-", f.request_id
        )
    console.print(table)


def retention(console: Console, reply: pml_pb2.RunRetentionResponse) -> None:
    title = "Retention (dry run: nothing changed)" if reply.dry_run else "Retention (applied)"
    table = Table(title=title)
    for column in ("pattern", "action", "reason", "superseded by"):
        table.add_column(column)
    for e in reply.entries:
        action = resources_pb2.RetentionAction.Name(e.action).removeprefix("RETENTION_ACTION_")
        table.add_row(_short(e.pattern), action.lower(), e.reason, _short(e.superseded_by) or "-")
    console.print(table)


def stats(console: Console, s: pml_pb2.GetStatsResponse) -> None:
    table = Table(title="Stats", show_header=False)
    for key in ("patterns", "capabilities", "intents", "executions", "rejected", "failures_logged"):
        table.add_row(key.replace("_", " "), str(getattr(s, key)))
    console.print(table)
