"""The benchmark history (docs/history/benchmark-runs.md) is generated from the per-run JSON
files by tools/gen_bench_history.py: the committed page is what the files give, and every run
file shows up in it, newest first, with the rows that have a target."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gen_bench_history.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_bench_history", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_file(path: Path, time: str, commit: str, met: bool) -> None:
    row = {
        "suite": "demo",
        "metric": "captures/s | streamed",
        "value": 100.0,
        "unit": "1/s",
        "baseline": 200.0,
        "baseline_name": "null",
        "target": 0.4,
        "lower_is_better": False,
        "extra": {},
        "ratio": 0.5,
        "met": met,
    }
    untargeted = {**row, "metric": "p50", "target": None, "met": None}
    machine = {"python": "3.11", "platform": "Linux", "cpus": 2, "commit": commit, "time": time}
    machine |= {"large": False, "seconds": 1.5, "failed": None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine, "rows": [row, untargeted]}))


def test_the_committed_history_is_what_the_run_files_give() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_every_run_is_listed_newest_first_with_its_targeted_rows(tmp_path: Path) -> None:
    tool = _tool()
    _run_file(
        tmp_path / "runs" / "20261201T000000Z-latest-bench_demo.json", "2026-12-01", "aaa", True
    )
    _run_file(
        tmp_path / "runs" / "20261202T000000Z-latest-bench_demo.json", "2026-12-02", "bbb", False
    )
    # the current suite file is the newest run again: listed once
    _run_file(tmp_path / "latest" / "bench_demo.json", "2026-12-02", "bbb", False)
    text = tool.render(tmp_path)
    assert text.index("| 2026-12-02 | bench_demo") < text.index("| 2026-12-01 | bench_demo")
    assert text.count("| 2026-12-02 | bench_demo") == 1
    assert "| `bbb` | 2 | 1.5 | 0 of 1 |" in text
    assert "| `aaa` | 2 | 1.5 | 1 of 1 |" in text
    assert "| captures/s \\| streamed | 100 | 1/s | 0.5 | >= 0.4 | NO |" in text
    assert "| p50 |" not in text  # rows without a target are in latest.md, not the history
