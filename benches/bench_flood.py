"""A tenant flooding the server against its neighbour (issue 9): the neighbour's Suggest p50 while
a separate process floods with 24 threads, against the same flood aimed at another server process
on this machine (what CPU contention alone costs) and against no flood at all; and the server's
CPU time per refused call against its CPU time per served Suggest. The procedure is
`testing/flood_measure.py`, shared with the reliability test."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from benches.common import Row
from testing.flood_measure import measure, start_pair

SUITE = "flood"
FLOOD_THREADS = 24
TENANT_LIMIT = 4  # the default with a keys file: a quarter of the 16 RPC threads


def run(large: bool) -> list[Row]:
    quick = os.environ.get("PML_BENCH_QUICK") == "1"
    trials, calls = (9, 400) if large else (1, 30) if quick else (5, 200)
    with tempfile.TemporaryDirectory() as tmp:
        shared, control, keys = start_pair(Path(tmp), TENANT_LIMIT)
        try:
            figures = measure(
                shared,
                control,
                keys["flood"],
                keys["calm"],
                trials=trials,
                calls=calls,
                threads=FLOOD_THREADS,
                tenant_slots=TENANT_LIMIT,
            )
        finally:
            shared.kill()
            control.kill()
    p50 = figures["neighbour_p50_ms_median"]
    extra = {
        k: figures[k]
        for k in (
            "trials",
            "calls_per_phase",
            "neighbour_p50_ms_per_trial",
            "ratio_raw",
            "ratio_vs_control",
            "control_ratio",
            "flood_codes_same_server",
            "neighbour_errors",
        )
    }
    refusal = figures["refusal_only"]
    neighbour = [
        Row(
            SUITE,
            f"neighbour Suggest p50, flood on its server ({label})",
            p50["same_server"],
            "ms",
            baseline=p50[key],
            baseline_name=baseline_name,
            target=1.5,
            lower_is_better=True,
            extra=extra,
        )
        for label, key, baseline_name in (
            (
                "control: same flood on another server",
                "other_server",
                "flood on another server process",
            ),
            ("raw: no flood at all", "alone", "no flood"),
        )
    ]
    return [
        *neighbour,
        Row(
            SUITE,
            "server CPU per refused call (tenant over quota)",
            refusal["server_cpu_us_per_call"],
            "us",
            baseline=figures["server_cpu_us_per_neighbour_call_alone"],
            baseline_name="server CPU per served Suggest",
            lower_is_better=True,
            extra={"calls": refusal["calls"], "refused": refusal["refused"]},
        ),
    ]
