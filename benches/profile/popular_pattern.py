"""A capture's CPU as one pattern gathers intents (rule 5's near-duplicate check compares each
new intent with the pattern's; issue 19): the same code captured with `intents` distinct
intents, in batches of `batch` (`Engine.record_many`, hashing model, `fast` durability, fresh
store), the CPU a capture of this thread printed for each step of `step` captures:

    python -m benches.profile.popular_pattern [INTENTS] [STEP] [BATCH]

Defaults 3000 500 32. Before the change in service/_near.py (at 7785ddf, same extension) the
last step took 13.1 ms a capture against 1.2 ms for the first (every capture read all the
pattern's intents); after it, 0.81 against 0.32.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, PageRequest, ToolCall
from pml_server.service import Engine

WORDS = (  # noqa: SIM905  (one line of words reads better than 24 items)
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega"
).split()
CODE = 'const r0 = await mcp.read_file({path: "a.json"});\nreturn mcp.parse_json({text: r0});'


def records(count: int) -> list[ExecutionRecord]:
    chosen = random.Random(1)
    calls = tuple(ToolCall(tool=t, ok=True) for t in ("read_file", "parse_json"))
    return [
        ExecutionRecord(
            request_id=f"r{n}",
            intent=" ".join(chosen.sample(WORDS, 6)) + f" item{n}",
            code=CODE,
            language="typescript",
            tool_calls=calls,
        )
        for n in range(count)
    ]


def cpu_by_step(
    todo: list[ExecutionRecord], step: int, batch: int, what: str, report: Callable[[Engine], str]
) -> list[float]:
    """`todo` captured in batches of `batch` by a fresh engine (hashing model, `fast`), the CPU
    a capture of this thread took over each step of `step` captures, printed; then `report`."""
    per_step: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pml-profile-") as tmp:
        config = EngineConfig(data_dir=Path(tmp) / "db", embedder="hashing", durability="fast")
        engine = Engine.open(config)
        try:
            if not engine.admin.wait_ready(60):
                raise RuntimeError("engine did not become ready")
            for first in range(0, len(todo), step):
                chunk = todo[first : first + step]
                start = time.thread_time()
                for at in range(0, len(chunk), batch):
                    outcomes = engine.record_many("t", chunk[at : at + batch])
                    bad = [o for o in outcomes if isinstance(o, Exception)]
                    if bad:
                        raise RuntimeError(f"capture refused: {bad[0]}")
                cpu = (time.thread_time() - start) / len(chunk) * 1e3
                per_step.append(cpu)
                print(f"{what} {first:6d} to {first + len(chunk):6d}: {cpu:.3f} ms CPU a capture")
            print(report(engine))
        finally:
            engine.close()
    return per_step


def main(argv: list[str]) -> list[float]:
    intents, step, batch = (int(a) for a in (argv + ["3000", "500", "32"][len(argv) :]))

    def report(engine: Engine) -> str:
        page = engine.list_patterns("t", PageRequest(page_size=10))
        return f"patterns {len(page.items)}, intents {[p.intent_count for p in page.items]}"

    return cpu_by_step(records(intents), step, batch, "intents", report)


if __name__ == "__main__":
    main(sys.argv[1:])
