"""A new pattern's CPU as its capability fills with patterns recorded with one request (an agent
that writes its code anew at each run: every pattern's intent has the same text, so the same
vector): `patterns` patterns of one tool signature, each with its own code and the intent "Read
JSON file", in batches of `batch` (`Engine.record_many`, hashing model, `fast` durability,
fresh store), the CPU a capture of this thread printed for each step of `step` captures:

    python -m benches.profile.crowded_capability [PATTERNS] [STEP] [BATCH]

Defaults 2000 500 32. Reading every tied intent to decide the capability (before
`service/_grouping.py`'s `decide_by_index`) took 21.8 ms a capture at 1,500 to 2,000 patterns
against 3.4 ms at the first 500; deciding from the index's scores, 3.0 against 1.1
(docs/capture.md, "Grouping a new pattern when the index settles it").
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, PageRequest, ToolCall
from pml_server.service import Engine

CALLS = tuple(ToolCall(tool=t, ok=True) for t in ("read_file", "parse_json"))


def record(n: int) -> ExecutionRecord:
    """The n-th run: the same request and tools, code of its own (an argument named for n)."""
    code = (
        'const r0 = await mcp.read_file({path: "a.json"});\n'
        f"return mcp.parse_json({{text: r0, k{n}: true}});"
    )
    return ExecutionRecord(
        request_id=f"r{n}",
        intent="Read JSON file",
        code=code,
        language="typescript",
        tool_calls=CALLS,
    )


def main(argv: list[str]) -> list[float]:
    patterns, step, batch = (int(a) for a in (argv + ["2000", "500", "32"][len(argv) :]))
    per_step: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pml-crowded-") as tmp:
        config = EngineConfig(data_dir=Path(tmp) / "db", embedder="hashing", durability="fast")
        engine = Engine.open(config)
        try:
            if not engine.admin.wait_ready(60):
                raise RuntimeError("engine did not become ready")
            for first in range(0, patterns, step):
                last = min(first + step, patterns)
                start = time.thread_time()
                for at in range(first, last, batch):
                    chunk = [record(n) for n in range(at, min(at + batch, last))]
                    bad = [o for o in engine.record_many("t", chunk) if isinstance(o, Exception)]
                    if bad:
                        raise RuntimeError(f"capture refused: {bad[0]}")
                cpu = (time.thread_time() - start) / (last - first) * 1e3
                per_step.append(cpu)
                print(f"patterns {first:6d} to {last:6d}: {cpu:.3f} ms CPU a capture")
            page = engine.list_capabilities("t", PageRequest(page_size=10))
            print(f"capabilities {[len(c.pattern_ids) for c in page.items]}")
        finally:
            engine.close()
    return per_step


if __name__ == "__main__":
    main(sys.argv[1:])
