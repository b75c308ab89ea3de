"""Edge recall of the step reader (docs/normalization.md, Steps) on the development sets' code.

For every execution of the dev set (NESTFUL references written as `rK`, `rK.field`, `rK["x"]`,
template strings) and of the multistep set (Seal-Tools, with its `edges` field), the edges the
data marks are compared with the `depends_on` edges `_core.normalize(...).steps` reads. The dev
set has no `edges` field: a line `const rN = ...` that mentions `rK` (K < N) marks the edge
K -> N (the set's README: references are written only that way). Recall must be 1.0 and code
without references must give no edge.

    .venv/bin/python -m benches.calibrate.step_edges [--devset DIR] [--multistep DIR]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from pml_server import _core

_REF = re.compile(r"\br(\d+)\b")
_LINE = re.compile(r"^const r(\d+) = ")


def marked_edges(code: str) -> set[tuple[int, int]]:
    """Edges (from, to), numbered from 1, that the code's `rK` mentions mark."""
    edges = set()
    for line in code.splitlines():
        head = _LINE.match(line)
        if head is None:
            continue
        to = int(head.group(1))
        for ref in _REF.findall(line[head.end() :]):
            if int(ref) < to:
                edges.add((int(ref), to))
    return edges


def read_edges(code: str, language: str) -> set[tuple[int, int]]:
    steps = _core.normalize(code, language).steps
    return {(d + 1, i + 1) for i, s in enumerate(steps) for d in s.depends_on}


def measure(path: Path, field: str | None) -> dict[str, float | int]:
    marked = found = false_edges = clean = clean_with_edges = executions = 0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        executions += 1
        want = {tuple(e) for e in row[field]} if field else marked_edges(row["code"])
        got = read_edges(row["code"], row["language"])
        marked += len(want)
        found += len(want & got)
        false_edges += len(got - want)
        if not want:
            clean += 1
            clean_with_edges += bool(got)
    return {
        "executions": executions,
        "marked_edges": marked,
        "recall": found / marked if marked else 1.0,
        "false_edges": false_edges,
        "executions_without_references": clean,
        "of_them_with_an_edge": clean_with_edges,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devset", type=Path, default=Path("/work/shared/devset"))
    parser.add_argument("--multistep", type=Path, default=Path("/work/shared/devset/multistep"))
    args = parser.parse_args()
    rows = {
        "devset (MetaTool + NESTFUL)": measure(args.devset / "executions.jsonl", None),
        "multistep (Seal-Tools)": measure(args.multistep / "executions.jsonl", "edges"),
    }
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
