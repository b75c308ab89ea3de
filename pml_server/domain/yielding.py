"""Yield points: where a long call lets the cheap calls of lighter tenants go first.

The server is one process with one GIL, so a few calls that each run tens of milliseconds of
Python (Suggest and retention over a tenant's giant patterns) take another tenant's 1 ms call
five times longer: every thread that wants the GIL gets a turn of the switch interval. Such
calls call `checkpoint()` in their loops (per pattern, per parameter). It costs one global
read while only one tenant has calls in progress; otherwise the call's scheduler
(`api/admission/fairness.py`, installed per thread for the call) may pause it there, GIL
released, until the neighbour's call is done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# True while calls of two tenants or more are in progress (kept by the scheduler): only then
# can a checkpoint have anything to do.
contended = False
_current = threading.local()


def checkpoint() -> None:
    """A point where the running call may be paused for the calls of lighter tenants."""
    if contended:
        hook: Callable[[], None] | None = getattr(_current, "hook", None)
        if hook is not None:
            hook()


@contextmanager
def installed(hook: Callable[[], None]) -> Iterator[None]:
    """`hook` is what `checkpoint` calls on this thread, for the duration of one call."""
    previous = getattr(_current, "hook", None)
    _current.hook = hook
    try:
        yield
    finally:
        _current.hook = previous
