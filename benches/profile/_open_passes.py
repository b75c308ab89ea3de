"""What the open-time passes' profiles share (docs/storage.md, Migrations): reopen a store and
time one pass from ready to done."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pml_server.service import Engine
from testing.engine import open_engine


def reopen_and_wait(
    engine: Engine, where: Path, wait: Callable[[Engine], int]
) -> tuple[Engine, int, float]:
    """`engine` closed and its store at `where` opened again; what `wait` (a pass's
    `admin.wait_...`, given the new engine) returned and the seconds it took."""
    engine.close()
    engine = open_engine(where)
    started = time.perf_counter()
    done = wait(engine)
    return engine, done, time.perf_counter() - started
