"""benches/README.md lists every module of benches/ in its table, one line each, so a new suite
or helper is described where a reader looks for it."""

from __future__ import annotations

import re
from pathlib import Path

BENCHES = Path(__file__).resolve().parents[2] / "benches"


def test_every_module_has_its_line() -> None:
    text = (BENCHES / "README.md").read_text()
    listed = re.findall(r"^\| `([a-z_]+)` \| ", text, re.MULTILINE)
    modules = {p.stem for p in BENCHES.glob("*.py")} - {"__init__"}
    assert sorted(modules - set(listed)) == [], "modules without a line in benches/README.md"
    assert sorted(set(listed) - modules - _suite_names(text)) == [], "lines of no module"


def _suite_names(text: str) -> set[str]:
    """The suites' own table names suites, not modules (`peer`, `api`, ...)."""
    section = text.split("| suite | what it measures | baseline |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)`", section, re.MULTILINE))
