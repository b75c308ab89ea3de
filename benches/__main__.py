"""`make bench`: run every `benches/bench_*.py` suite, print one table, write results.

A suite is a module with `run(large: bool) -> list[Row]`. Each suite's rows go to its own file,
`benches/results/latest/<suite>.json` (`large/` with --large, `quick/` with --quick), with the
machine, the git commit and the seconds it took; a run of some suites replaces only theirs.
A copy of each real run's file is kept in `benches/results/runs/` (the history,
`tools/gen_bench_history.py`). `latest.md` (`large.md`, `quick.md`) is then rendered from
every suite file in the folder, one header line per suite saying which commit measured it.
`python -m benches --render` only renders.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

from benches.common import Row

HERE = Path(__file__).resolve().parent
_BUDGET_SECONDS = 15 * 60  # the whole `make bench` on the 2-core machine (issue 8)


def _suites(only: list[str]) -> list[str]:
    """Every suite, alphabetically; or those matching `only`, in the order they are named."""
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if not only:
        return names
    chosen: list[str] = []
    for pattern in only:
        chosen += [n for n in names if pattern in n and n not in chosen]
    return chosen


def _machine() -> dict[str, object]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "commit": commit,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _table(rows: list[Row]) -> str:
    lines = [
        "| suite | metric | value | unit | baseline | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        target = (
            "-" if r.target is None else ("<= " if r.lower_is_better else ">= ") + _fmt(r.target)
        )
        met = {None: "-", True: "yes", False: "NO"}[r.met]
        base = f"{_fmt(r.baseline)} ({r.baseline_name})" if r.baseline is not None else "-"
        lines.append(
            f"| {r.suite} | {r.metric} | {_fmt(r.value)} | {r.unit} | {base} | {_fmt(r.ratio)} "
            f"| {target} | {met} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large", action="store_true", help="bigger data sets (slow)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, for checking that suites run (suites that read PML_BENCH_QUICK)",
    )
    parser.add_argument(
        "--render", action="store_true", help="only rebuild the .md files from the suite files"
    )
    parser.add_argument("only", nargs="*", help="run only suites whose name contains these")
    args = parser.parse_args()
    if args.render:
        for stem in ("latest", "large", "quick"):
            if (HERE / "results" / stem).is_dir():
                _render(stem)
        return 0
    if args.quick:
        os.environ["PML_BENCH_QUICK"] = "1"  # inherited by the suites' child processes too
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    failed: dict[str, str] = {}
    for name in _suites(args.only):
        suite_start = len(rows)
        print(f"== {name}", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            module = importlib.import_module(f"benches.{name}")
            rows.extend(module.run(large=args.large))
        except Exception as err:  # one broken suite must not lose the others' figures
            traceback.print_exc()
            failed[name] = f"{type(err).__name__}: {err}"
        seconds[name] = round(time.monotonic() - start, 1)
        print(f"== {name} took {seconds[name]} s", file=sys.stderr, flush=True)
        # after every suite: a cut run keeps what it measured
        _write(args, name, rows[suite_start:], seconds[name], failed.get(name))
    print(_table(rows))
    total = round(sum(seconds.values()), 1)
    if total > _BUDGET_SECONDS and not args.large:
        print(
            f"warning: the run took {total} s, over the {_BUDGET_SECONDS} s budget", file=sys.stderr
        )
    for name, why in failed.items():
        print(f"FAILED suite {name}: {why}", file=sys.stderr)
    return 1 if failed else 0


def _write(
    args: argparse.Namespace, name: str, rows: list[Row], seconds: float, failure: str | None
) -> None:
    # a --quick run never replaces real results, nor a --large run the standard ones
    stem = "quick" if args.quick else "large" if args.large else "latest"
    folder = HERE / "results" / stem
    folder.mkdir(parents=True, exist_ok=True)
    machine = {**_machine(), "large": args.large, "seconds": seconds, "failed": failure}
    text = json.dumps({"machine": machine, "rows": [r.as_dict() for r in rows]}, indent=2) + "\n"
    (folder / f"{name}.json").write_text(text)
    if not args.quick:
        # Every real run is kept, and the history (docs/history/benchmark-runs.md) generated
        # from these files is rewritten at once, so a committed run never leaves it stale.
        runs = HERE / "results" / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        stamp = str(machine["time"]).replace(":", "").replace("-", "")
        (runs / f"{stamp}-{stem}-{name}.json").write_text(text)
        history = HERE.parent / "tools" / "gen_bench_history.py"
        subprocess.run([sys.executable, str(history)], check=True)
    _render(stem)


def _render(stem: str) -> None:
    """`<stem>.md` from every suite file in `results/<stem>/`, in suite order."""
    folder = HERE / "results" / stem
    parts = [f"# pml benchmarks ({stem})", ""]
    total = 0.0
    for path in sorted(folder.glob("bench_*.json")):
        data = json.loads(path.read_text())
        machine = data["machine"]
        total += float(machine.get("seconds") or 0)
        header = ", ".join(f"{k}: {v}" for k, v in machine.items() if k != "failed")
        failed = f" FAILED: {machine['failed']}" if machine.get("failed") else ""
        derived = ("ratio", "met")
        rows = [Row(**{k: v for k, v in r.items() if k not in derived}) for r in data["rows"]]
        parts += [f"## {path.stem}", "", header + failed, "", _table(rows), ""]
    parts.insert(1, f"\nSum of the suites' seconds: {round(total, 1)}")
    (HERE / "results" / f"{stem}.md").write_text("\n".join(parts))


if __name__ == "__main__":
    raise SystemExit(main())
