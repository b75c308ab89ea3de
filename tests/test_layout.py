"""The support package `testing/` is what tests and benchmarks share: the benchmarks and
`testing/` never import `tests` (a benchmark run needs no test module), and `testing/` imports
no benchmark, so no two of them import each other in a cycle (docs/architecture.md, Layout)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_roots(path: Path) -> set[str]:
    """The top-level package of every module `path` imports, and of every module it runs with
    `python -m` (a string argument "pkg.module" after "-m")."""
    tree = ast.parse(path.read_text(), str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.List | ast.Tuple):
            items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            for flag, module in itertools.pairwise(items):
                if flag == "-m" and isinstance(module, str):
                    roots.add(module.split(".")[0])
    return roots


def offenders(folder: str, forbidden: set[str]) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = imported_roots(path) & forbidden
        if bad:
            found.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    return found


def test_benches_never_import_tests() -> None:
    assert offenders("benches", {"tests"}) == []


def test_testing_imports_neither_tests_nor_benches() -> None:
    assert offenders("testing", {"tests", "benches"}) == []


def test_the_check_sees_an_import_of_tests(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom tests.support import Clock\n"
        "args = ['python', '-m', 'tests.reliability.serve_pml']\n"
    )
    assert imported_roots(module) == {"os", "tests"}
