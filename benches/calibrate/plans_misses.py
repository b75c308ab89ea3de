"""Why plans miss (docs/ranking.md, Plans, "Misses"): `compose` replayed over cached inputs.

`collect` fills the two stores of `benches/bench_plans.py` (the multistep set's; the dev set's
less the exact queries' held-apart executions), asks every compose query, every dev single-tool
query and every exact multi-step query once with plans on, and keeps what the service handed
`compose` (request parts, their hits, weights, the whole request's first suggestions on each
part) with what the bench needs to judge the answer. `report` replays `compose` from that cache,
so a change to `pml_server/ranking/plans/` is measured in seconds: the bench's compose rows
(tune / held apart), both false-plan rows, and the tune part's misses sorted by cause:

- `withheld`: no plan offered (one capability judged to cover the request, or below the margin);
- `retrieval`: an expected tool is in no request part's hits (no plan could hold it);
- `split`: fewer request parts than expected tools not run together by one retrieved pattern;
- `order`: the plan has the expected tools, in another order;
- `choice`: every expected tool was retrievable, the plan holds a wrong or missing one.

    .venv/bin/python -m benches.calibrate.plans_misses collect [--cache PATH]
    .venv/bin/python -m benches.calibrate.plans_misses report [--cache PATH] [--show N] [--held]

`--held` also prints the held-apart compose figures (kept off while tuning:
docs/history/ranking-experiments.md, Plans, "Which figures were seen while tuning").
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.bench_plans import (
    EMBEDDER,
    MULTISTEP,
    TENANT,
    _groups,
    _jsonl,
    _recall,
    fill_exact_store,
    fill_multistep,
    held_apart,
)
from benches.harness import devset, make_exact_multistep
from benches.harness.quality_engine import open_engine
from pml_server.domain.model import SuggestQuery
from pml_server.ranking import plans
from pml_server.ranking.plans import _compose
from pml_server.service import _suggest

CACHE = Path(tempfile.gettempdir()) / "pml-plans-misses.pkl"


@dataclass
class Case:
    """One request: `compose`'s inputs and what judges its answer."""

    kind: str  # "compose", "single" or "exact"
    qid: str
    intent: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    expected: tuple[str, ...] = ()  # compose: the expected tools in order
    right_suggested: bool = False  # single / exact: the right capability among the suggestions
    top_tools: tuple[str, ...] = ()  # the top suggestion's tools


def _capturing(sink: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Callable[..., Any]:
    real = plans.compose

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sink.append((args, kwargs))
        return real(*args, **kwargs)

    return wrapper


def _ask(engine: Any, intent: str, sink: list[Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    sink.clear()
    result = engine.suggest(TENANT, SuggestQuery(intent, k=5))
    args, kwargs = sink[0] if sink else ((), {})
    return result, args, kwargs


def collect(cache: Path) -> None:
    sink: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    _suggest.compose = _capturing(sink)  # type: ignore[attr-defined]
    cases: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="pml-plans-misses-") as tmp:
        engine = open_engine(Path(tmp) / "multistep", EMBEDDER, None)
        try:
            fill_multistep(engine)
            for q in _jsonl(MULTISTEP / "queries.jsonl"):
                result, args, kwargs = _ask(engine, str(q["intent"]), sink)
                top = result.suggestions[0].pattern.tools_used if result.suggestions else ()
                cases.append(
                    Case("compose", str(q["id"]), str(q["intent"]), args, kwargs,
                         tuple(q["expected_tools"]), top_tools=tuple(top))
                )  # fmt: skip
        finally:
            engine.close()
        engine = open_engine(Path(tmp) / "devset", EMBEDDER, None)
        try:
            group_of = fill_exact_store(engine)
            _, queries = devset.load()
            asked = [("single", q.id, q.intent, q.group) for q in queries if not q.multi_tool]
            _, exact = make_exact_multistep.build()
            asked += [("exact", q.id, q.intent, q.expected_group) for q in exact]
            for kind, qid, intent, group in asked:
                result, args, kwargs = _ask(engine, intent, sink)
                right = group in _groups(result, group_of)
                cases.append(Case(kind, qid, intent, args, kwargs, right_suggested=right))
        finally:
            engine.close()
    cache.write_bytes(pickle.dumps(cases))
    print(f"{len(cases)} cases -> {cache}")


def replay(case: Case) -> plans.Composed | None:
    if not case.args:
        return None  # one request part: no plan
    return plans.compose(*case.args, **case.kwargs)


def _retrieved(case: Case) -> set[str]:
    hits = case.args[1]
    whole = case.kwargs.get("whole", ())
    found = {
        t for part in hits for h in part[: plans.PART_HITS] for t in h.suggestion.pattern.tools_used
    }
    return found | {t for part in whole[:1] for h in part for t in h.suggestion.pattern.tools_used}


def _unthresholded(case: Case) -> plans.Composed:
    """The plans `compose` finds without its least total (what a withheld plan would be)."""
    least = _compose.MIN_PLAN_TOTAL_POOLED
    _compose.MIN_PLAN_TOTAL_POOLED = 0.0
    try:
        return plans.compose(*case.args, **case.kwargs)
    finally:
        _compose.MIN_PLAN_TOTAL_POOLED = least


def cause(case: Case, composed: plans.Composed | None) -> str:
    """Why the top plan is not the expected sequence; a plan withheld by its least total is
    judged as the plan it would have been (`withheld+...`)."""
    expected = list(case.expected)
    if composed is None:
        return "withheld (one part)"
    prefix = ""
    if not composed.plans:
        if composed.covered_by_one:
            return "withheld (covered by one)"
        composed = _unthresholded(case)
        prefix = "withheld+"
        if not composed.plans:
            return "withheld (margin)"
    got = list(composed.plans[0].tools)
    if got == expected:
        return prefix + "right"
    if sorted(got) == sorted(expected):
        return prefix + "order"
    if not set(expected) <= _retrieved(case):
        return prefix + "retrieval"
    if len(case.args[0]) < len(set(expected)):
        return prefix + "split"
    if set(expected) < set(got):
        return prefix + "extra part"
    if set(got) < set(expected):
        return prefix + "missing part"
    return prefix + "wrong tool"


def _share(values: Sequence[float]) -> float:
    return sum(values) / max(len(values), 1)


def report(cache: Path, show: int, held: bool) -> None:
    cases: list[Case] = pickle.loads(cache.read_bytes())
    compose_cases = [c for c in cases if c.kind == "compose"]
    parts = {"tune": [c for c in compose_cases if not held_apart(c.qid)]}
    if held:
        parts["held apart"] = [c for c in compose_cases if held_apart(c.qid)]
    causes: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for name, group in parts.items():
        exact: list[float] = []
        recall: list[float] = []
        offered = 0
        for c in group:
            composed = replay(c)
            top = composed.plans[0].tools if composed and composed.plans else ()
            offered += bool(top)
            exact.append(float(list(top) == list(c.expected)))
            recall.append(_recall(list(c.expected), top) if top else 0.0)
            if name == "tune":
                why = cause(c, composed)
                causes[why] += 1
                if why != "right":
                    line = (
                        f"  {c.qid}: want {' > '.join(c.expected)}\n    got  "
                        f"{' > '.join(top) or '-'}\n    parts {list(c.args[0]) if c.args else []}"
                    )
                    examples.setdefault(why, []).append(line)
        print(
            f"compose {name} ({len(group)}): in order {_share(exact):.4f}  recall "
            f"{_share(recall):.4f}  offered {offered / max(len(group), 1):.3f}"
        )
    for kind in ("single", "exact"):
        group = [c for c in cases if c.kind == kind]
        false = 0
        for c in group:
            composed = replay(c)
            false += bool(composed and composed.plans) and c.right_suggested
        print(f"false plans {kind} ({len(group)}): {false / max(len(group), 1):.4f} ({false})")
    print("tune causes:", dict(causes.most_common()))
    for why, lines in examples.items():
        print(f"-- {why} ({len(lines)})")
        for line in lines[:show]:
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["collect", "report"])
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--show", type=int, default=0)
    parser.add_argument("--held", action="store_true")
    args = parser.parse_args()
    if args.command == "collect":
        collect(args.cache)
    else:
        report(args.cache, args.show, args.held)


if __name__ == "__main__":
    main()
