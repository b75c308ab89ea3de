"""The figures every reliability test reports: to stdout (seen with `pytest -s`), into the
assertion messages, and into `tests/reliability/figures/<test>.json` so a CI run leaves them
behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIGURES_DIR = Path(__file__).resolve().parent / "figures"


def report(name: str, figures: dict[str, Any]) -> str:
    """Print the figures, write them to figures/<name>.json, and return them as one line for
    assertion messages."""
    FIGURES_DIR.mkdir(exist_ok=True)
    text = json.dumps(figures, sort_keys=True, default=str)
    (FIGURES_DIR / f"{name}.json").write_text(text + "\n")
    print(f"\n[reliability] {name}: {text}", flush=True)
    return f"{name}: {text}"
