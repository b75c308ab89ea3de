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

from benches.profile.popular_pattern import cpu_by_step
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

    def report(engine: Engine) -> str:
        page = engine.list_capabilities("t", PageRequest(page_size=10))
        return f"capabilities {[len(c.pattern_ids) for c in page.items]}"

    return cpu_by_step([record(n) for n in range(patterns)], step, batch, "patterns", report)


if __name__ == "__main__":
    main(sys.argv[1:])
