"""benches/README.md lists every module of benches/ and of its subfolders in its tables, one line
each (`harness.fill` for benches/harness/fill.py), so a new suite or helper is described where a
reader looks for it; the top of benches/ holds only the suites and the runner."""

from __future__ import annotations

import re
from pathlib import Path

BENCHES = Path(__file__).resolve().parents[2] / "benches"
SUBFOLDERS = ("harness", "profile", "calibrate")


def _modules() -> set[str]:
    """Every module as `python -m benches.NAME` names it, packages' `__init__` left out."""
    return {
        ".".join(p.relative_to(BENCHES).with_suffix("").parts)
        for p in BENCHES.rglob("*.py")
        if p.name != "__init__.py" and not {"results", "data", ".cache"} & set(p.parts)
    }


def test_every_module_has_its_line() -> None:
    text = (BENCHES / "README.md").read_text()
    listed = re.findall(r"^\| `([a-z_.]+)` \| ", text, re.MULTILINE)
    modules = _modules()
    assert sorted(modules - set(listed)) == [], "modules without a line in benches/README.md"
    assert sorted(set(listed) - modules - _suite_names(text)) == [], "lines of no module"


def test_top_holds_suites_and_runner_only() -> None:
    top = {p.stem for p in BENCHES.glob("*.py")} - {"__init__", "__main__", "common"}
    assert sorted(n for n in top if not n.startswith("bench_")) == [], "move it to a subfolder"
    for folder in SUBFOLDERS:
        assert (BENCHES / folder / "__init__.py").is_file(), folder
        assert not list((BENCHES / folder).glob("bench_*.py")), "suites stay at the top"


def _suite_names(text: str) -> set[str]:
    """The suites' own table names suites, not modules (`peer`, `api`, ...)."""
    section = text.split("| suite | what it measures | baseline |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)`", section, re.MULTILINE))
