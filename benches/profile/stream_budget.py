"""What a streamed capture may cost the server (issue 19's client-vector row): the api suite's
client-vector load (8 StreamTraces from one load process, a record a message) against the null
servicer made to spend, on every message, some CPU in Python with the GIL held and some in native
code with it released (`python -m benches.harness.service_server null-spending`), each point against
the plain null servicer timed right before and after it:

    python -m benches.profile.stream_budget [PYTHON_US[:NATIVE_US] ...]

Default points: 0, 100, 200, 300, 400 and 600 us of Python; 150:150, 300:150. Prints each
point's rate, its ratio to the null servicer, and the server's CPU a message. Our server's own
CPU a capture on the same load is the api suite's row (`server_cpu_ms_per_capture`).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from benches.harness import service_harness as harness

DEFAULT_POINTS = ("0", "100", "200", "300", "400", "600", "150:150", "300:150")


def _rate(plan: harness.Plan, *args: str) -> tuple[float, float]:
    """(messages/s, server CPU ms a message) of the client-vector streams against a server."""
    with harness.server(*args) as srv:
        spent = srv.cpu_seconds()
        result = harness.load(srv.target, "stream", 8, plan, "vector", 0)
        cpu_ms = 1000.0 * (srv.cpu_seconds() - spent) / result["count"]
    if result["errors"]:
        raise RuntimeError(f"streams against {args}: {result}")
    return result["qps"], cpu_ms


def measure(point: str, plan: harness.Plan) -> dict[str, float]:
    """One point, `PYTHON_US[:NATIVE_US]`, between two runs of the plain null servicer."""
    python_us, _, native_us = point.partition(":")
    before, _ = _rate(plan, "null")
    rate, cpu_ms = _rate(plan, "null-spending", python_us, native_us or "0")
    after, _ = _rate(plan, "null")
    return {
        "python_us": float(python_us),
        "native_us": float(native_us or 0),
        "rate": rate,
        "ratio": rate / ((before + after) / 2),
        "server_cpu_ms": cpu_ms,
        "null_before": before,
        "null_after": after,
    }


def main(argv: list[str]) -> None:
    plan = replace(harness.Plan.for_run(large=False), seconds=3.0, max_requests=4000)
    print("python us  native us  streamed/s  x null  server CPU ms a message  (null before/after)")
    for point in argv or DEFAULT_POINTS:
        m = measure(point, plan)
        print(
            f"{m['python_us']:9.0f}  {m['native_us']:9.0f}  {m['rate']:10.0f}  "
            f"{m['ratio']:6.3f}  {m['server_cpu_ms']:23.3f}  "
            f"({m['null_before']:.0f} / {m['null_after']:.0f})",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
