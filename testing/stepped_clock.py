"""A wall clock a test steps under a real server process (tests/reliability/test_clock_steps.py):
`testing.serve_pml` started with `PML_TEST_CLOCK_OFFSET_FILE` reads the wall clock as the
machine's plus the offset in seconds that file holds, read at every call, so a test sets the
server's clock back or forward (an NTP step, a clock set wrong then fixed) without touching the
machine's. Every wall clock the server's Python reads goes through it: `time.time`,
`time.time_ns` and `datetime.now` where the backups read it (`backup/_dir.py`); the monotonic
clock, sleeps and waits are left alone, as a step leaves them. (libfaketime, which would step
the process's C library clock, breaks Python's `time.sleep`: EINVAL from its
`clock_nanosleep`.) Step the clock once the server serves: grpc's Python layer takes its
start's deadline from `time.time` while its core waits on the machine's clock, so a server whose
clock is ahead when it starts waits out the step."""

from __future__ import annotations

import time
from datetime import UTC, datetime, tzinfo
from pathlib import Path

ENV = "PML_TEST_CLOCK_OFFSET_FILE"


def set_offset(path: Path, seconds: float) -> None:
    """Step the clock of the servers reading `path` to the machine's plus `seconds`."""
    partial = path.with_suffix(".partial")
    partial.write_text(f"{seconds!r}\n")
    partial.replace(path)  # read whole at the next clock call


def install(path: Path) -> None:
    """Make this process's wall clock the machine's plus the offset in `path` (0 while it is
    missing or unreadable)."""
    from pml_server.backup import _dir

    machine_time, machine_time_ns = time.time, time.time_ns

    def offset_ns() -> int:
        try:
            return int(float(path.read_text()) * 1e9)
        except (OSError, ValueError):
            return 0

    def stepped_time_ns() -> int:
        return machine_time_ns() + offset_ns()

    def stepped_time() -> float:
        return machine_time() + offset_ns() / 1e9

    class SteppedDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> SteppedDatetime:
            moment = datetime.fromtimestamp(stepped_time(), tz or UTC)
            return cls.fromisoformat(moment.isoformat())

    time.time = stepped_time
    time.time_ns = stepped_time_ns
    setattr(_dir, "datetime", SteppedDatetime)  # noqa: B010 (the module's clock, replaced)
