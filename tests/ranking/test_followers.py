"""What follows a step, learned from workflows (docs/ranking.md, Sessions, "Workflows"): the
core's `RankTable.followers` equals a plain reading of the rule over random tables, and keeps
the workflows with the most successes when there are more than its limit."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.capture.rules import same_tool
from pml_server.ranking.table import RankTable

# `a` is also spelled with two servers' namespaces: one tool, or two (`same_tool`)
TOOLS = ["a", "b", "c", "d", "e", "x:a", "y:a"]


@dataclass(frozen=True)
class Pattern:
    id: str
    capability: str
    tools: tuple[str, ...]
    successes: int
    last_used_ms: int
    flagged: bool
    removed: bool

    @property
    def sequence(self) -> tuple[str, ...]:
        """Each tool once, in the order first run (the table's `sequence`)."""
        return tuple(dict.fromkeys(self.tools))


def _capability_of(tools: tuple[str, ...]) -> str:
    # one capability per tool set, as capture groups them, but a second one for some sets
    return "cap-" + "+".join(sorted(set(tools)))


patterns = st.lists(
    st.builds(
        lambda n, tools, alt, s, ms, f, r: Pattern(
            f"p{n:02d}", _capability_of(tools) + ("-alt" if alt else ""), tools, s, ms, f, r
        ),
        st.integers(0, 99),
        st.lists(st.sampled_from(TOOLS), min_size=1, max_size=5).map(tuple),
        st.booleans(),
        st.integers(0, 5),
        st.integers(0, 10**6),
        st.booleans(),
        st.booleans(),
    ),
    max_size=24,
    unique_by=lambda p: p.id,
)


def _table(rows: list[Pattern]) -> RankTable:
    table = RankTable()
    for p in rows:
        table.set_pattern(p.id, p.capability, p.tools, p.flagged, False)
        table.set_counters(p.id, p.successes, 0, p.successes, p.last_used_ms, ())
        if p.removed:
            table.remove_pattern(p.id)
    return table


def _reference(rows: list[Pattern], previous: list[str], limit: int) -> list[tuple[str, int, int]]:
    """The rule read plainly (docs/ranking.md, Sessions, "Workflows")."""
    live = sorted((p for p in rows if not p.removed and not p.flagged), key=lambda p: p.id)
    last = previous[-1]

    def at(p: Pattern) -> int:  # where the step's last tool is first run, -1 if never
        return next((i for i, t in enumerate(p.sequence) if same_tool(t, last)), -1)

    workflows = [p for p in live if p.successes > 0 and 0 <= at(p) < len(p.sequence) - 1]
    workflows.sort(key=lambda p: (-p.successes, p.id))
    out = []
    for w in workflows[:limit]:
        rest = w.sequence[at(w) + 1 :]
        taught: list[str] = []
        for tools in [rest[:1], rest] if len(rest) > 1 else [rest]:
            for p in live:
                if set(p.tools) == set(tools) and p.capability not in taught:
                    taught.append(p.capability)
        out += [(c, w.successes, w.last_used_ms) for c in taught]
    return out


@settings(deadline=None, max_examples=300)
@given(
    patterns,
    st.lists(st.sampled_from([*TOOLS, "never", "mcp__x__a", "z:a"]), min_size=1, max_size=3),
    st.integers(0, 6),
)
def test_followers_read_the_rule(rows: list[Pattern], previous: list[str], limit: int) -> None:
    assert _flat(_table(rows).followers(previous, limit)) == sorted(
        _reference(rows, previous, limit)
    )


def _flat(taught: list[tuple[list[str], list[tuple[int, int]]]]) -> list[tuple[str, int, int]]:
    """The core's groups as the rule reads them: a (capability, successes, last use) for each
    capability of a set and each workflow that taught it, sorted."""
    return sorted((c, n, ms) for caps, flows in taught for c in caps for n, ms in flows)


def test_a_workflow_teaches_its_next_step_and_the_rest_of_its_steps() -> None:
    rows = [
        Pattern("w1", "search>fetch>summarize", ("a", "b", "c"), 3, 7, False, False),
        Pattern("w2", "search>summarize", ("a", "c"), 1, 9, False, False),
        Pattern("s-b", "fetch", ("b",), 5, 1, False, False),
        Pattern("s-c", "summarize", ("c",), 5, 1, False, False),
        Pattern("bc", "fetch>summarize", ("b", "c"), 2, 1, False, False),
    ]
    table = _table(rows)
    assert table.followers(["x", "a"], 10) == [
        (["fetch"], [(3, 7)]),
        (["fetch>summarize"], [(3, 7)]),
        (["summarize"], [(1, 9)]),
    ]
    # the workflow with the most successes first; the limit keeps the strongest
    assert table.followers(["a"], 1) == [(["fetch"], [(3, 7)]), (["fetch>summarize"], [(3, 7)])]
    # a step's last tool decides; a tool nothing follows, or one no pattern calls, has none
    assert table.followers(["a", "c"], 10) == []
    assert table.followers(["unknown"], 10) == []
    assert table.followers([], 10) == []


def test_a_set_many_capabilities_run_is_taught_once_whatever_the_workflows() -> None:
    """256 workflows run `a` then `b`, and 300 capabilities run `b` alone (an agent's `search`
    asked about many things): each capability is in the answer once, with the 256 workflows'
    counts beside them. Before: a row for each capability and workflow, 76,800 (at 2,000
    capabilities a Suggest naming `a` took 3.5 s)."""
    rows = [Pattern(f"w{n:03d}", "a>b", ("a", "b"), 1 + n % 3, n, False, False) for n in range(256)]
    rows += [Pattern(f"s{n:03d}", f"b-{n:03d}", ("b",), 1, 0, False, False) for n in range(300)]
    ((capabilities, workflows),) = _table(rows).followers(["a"], 256)
    assert sorted(capabilities) == sorted(f"b-{n:03d}" for n in range(300))
    assert sorted(workflows) == sorted((1 + n % 3, n) for n in range(256))
