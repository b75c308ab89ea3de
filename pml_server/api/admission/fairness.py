"""Cost-fair scheduling across tenants: a tenant's expensive calls give way to the cheap calls
of lighter tenants (docs/reliability.md, Expensive tenants).

Counting calls (`quotas`) cannot isolate a tenant whose every call costs tens of milliseconds of
Python: the server is one process with one GIL, and every thread that wants it gets turns of the
switch interval, so four such calls took a neighbour's 1.3 ms Suggest to 7 ms (5.4x) even with
their CPU debt refused past a burst. Here each unary call is timed in thread CPU time:

- A call is *short* until it has used `SHORT_CALL_SECONDS` of CPU, then *long*. A tenant whose
  recent calls were long (their mean CPU, `MEAN_WEIGHT`-weighted) starts its new calls long.
- A long call pauses at its checkpoints (`domain.yielding`, in the loops of Suggest, listings
  and retention) and before it starts, GIL released, while a short call of a lighter tenant is
  in progress or ended less than `NEIGHBOUR_GAP_SECONDS` ago (its client's next call is then
  probably on its way, and waits for the GIL in grpcio before this code can see it): lighter
  means its decayed CPU use (`USAGE_HALF_LIFE_SECONDS`) is not above the paused one's, this
  call's CPU so far included. The neighbour's calls then run as if alone and the expensive
  ones run when it pauses: a deficit-style order where the tenant that used less goes first.
- While another tenant is active (a call in progress or ended within `ACTIVE_SECONDS`), long
  calls run one at a time (the *long turn*): the neighbour's next call arrives in grpcio's poll
  thread and needs the GIL before anything here sees it, and one long call in the way costs it
  a switch interval, four of them several.
- Beside a neighbour that keeps calling, a paused tenant gets `QUANTUM_SECONDS` of CPU every
  `QUANTUM_EVERY_SECONDS` (1%) for one of its calls at a time, whatever the number of its
  calls, and no pause lasts more than `MAX_PAUSE_SECONDS`: a long call always progresses.
  Every quantum slows the neighbour's calls that run beside it, so quanta must be short and
  few (per call, four calls ran four 5 ms quanta at once every 100 ms). Paused calls are not
  woken when a neighbour's call ends (they must wait for the gap after it anyway) and look
  again every `PAUSE_POLL_SECONDS`: each look takes the GIL beside the neighbour.
  A tenant that makes many cheap calls soon
  uses more CPU than the one it pauses, is no longer lighter, and is not yielded to, so it
  cannot starve anybody by being cheap.

Checkpoints cost one global read while a single tenant is active, and take this lock once
every `CHECK_EVERY` checkpoints otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pml_server.domain import yielding

SHORT_CALL_SECONDS = 0.002  # CPU time after which a call is long (a plain Suggest: under 1 ms)
MEAN_WEIGHT = 0.2  # weight of the newest call in a tenant's mean call CPU
USAGE_HALF_LIFE_SECONDS = 2.0
ACTIVE_SECONDS = 1.0
# The longest one pause lasts, whatever else runs: a backstop (the quanta come sooner).
MAX_PAUSE_SECONDS = 1.0
# A lighter tenant's short call that ended this recently counts as running: a client calling
# back to back sends its next call within about a millisecond, and it reaches this code only
# after waiting for the GIL behind whatever runs meanwhile.
NEIGHBOUR_GAP_SECONDS = 0.003
# While a lighter neighbour calls back to back, a paused tenant still gets QUANTUM_SECONDS of
# CPU every QUANTUM_EVERY_SECONDS (1%), for one of its calls at a time: every quantum slows the
# neighbour's calls that run beside it, so they must be few and short, whatever the number of
# the paused tenant's calls. Each quantum was per call (four calls, four quanta of 5 ms every
# 100 ms, at once): the neighbour's p99 was 2.6x its baseline (docs/reliability.md, Expensive
# tenants).
QUANTUM_SECONDS = 0.001
QUANTUM_EVERY_SECONDS = 0.1
# How often a paused call looks again whether the neighbour went quiet (a turn given back or a
# call ended wakes it sooner): each look takes the GIL, beside the neighbour's calls.
PAUSE_POLL_SECONDS = 0.01
CHECK_EVERY = 8  # checkpoints between two looks at the scheduler's state


class _Call:
    __slots__ = ("_fairness", "free_until", "long", "started", "tenant", "ticks")

    def __init__(self, fairness: CpuFairness, tenant: str, long: bool) -> None:
        self._fairness = fairness
        self.tenant = tenant
        self.started = time.thread_time()
        self.long = long
        self.ticks = 0
        self.free_until = 0.0  # thread CPU time until which it does not pause (a quantum)

    def checkpoint(self) -> None:
        self.ticks += 1
        if self.ticks % CHECK_EVERY == 0:
            self._fairness._checkpoint(self)


class CpuFairness:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        self._calls: dict[str, int] = {}  # tenant -> calls in progress
        self._short: dict[str, int] = {}  # tenant -> short calls in progress
        self._short_ended: dict[str, float] = {}  # tenant -> when its last short call ended
        self._seen: dict[str, float] = {}  # tenant -> when its last call started or ended
        self._usage: dict[str, tuple[float, float]] = {}  # tenant -> (decayed CPU s, as of)
        self._mean_call: dict[str, float] = {}  # tenant -> mean CPU seconds of its calls
        self._long_turn: _Call | None = None
        self._quantum_at: dict[str, float] = {}  # tenant -> when one of its calls last got one
        self._paused = 0  # calls waiting in `_pause` now
        self.pauses = 0  # calls paused so far, and for how long (for /metrics and tests)
        self.paused_seconds = 0.0

    def totals(self) -> tuple[int, float]:
        """Calls paused so far, and the seconds they spent paused."""
        return self.pauses, self.paused_seconds

    @contextmanager
    def call(self, tenant: str) -> Iterator[None]:
        """One call of `tenant`: timed, and paused for lighter tenants once it is long."""
        with self._lock:
            call = _Call(self, tenant, self._mean_call.get(tenant, 0.0) > SHORT_CALL_SECONDS)
            self._calls[tenant] = self._calls.get(tenant, 0) + 1
            if not call.long:
                self._short[tenant] = self._short.get(tenant, 0) + 1
            self._seen_now(tenant)
            if call.long:
                self._pause(call)  # queued behind the neighbours' calls already running
        try:
            with yielding.installed(call.checkpoint):
                yield
        finally:
            cpu = time.thread_time() - call.started
            with self._lock:
                self._end(call, cpu)

    def _seen_now(self, tenant: str) -> None:
        now = self._clock()
        self._seen[tenant] = now
        if len(self._seen) > 2 * len(self._calls) + 64:  # forget tenants idle for long
            for name in [t for t, at in self._seen.items() if now - at > ACTIVE_SECONDS]:
                if name not in self._calls:
                    del self._seen[name]
        yielding.contended = len(self._calls) > 1 or self._others_active(tenant, now)

    def _others_active(self, tenant: str, now: float) -> bool:
        return any(t != tenant and now - at < ACTIVE_SECONDS for t, at in self._seen.items())

    def _end(self, call: _Call, cpu: float) -> None:
        tenant = call.tenant
        left = self._calls[tenant] - 1
        if left:
            self._calls[tenant] = left
        else:
            del self._calls[tenant]
        if not call.long:
            # No wake-up: what waits for this call now waits for the gap after it too, and four
            # paused calls woken at every end of a neighbour's call took the GIL from the
            # neighbour's next one, just arriving.
            self._drop_short(tenant, wake=False)
            self._short_ended[tenant] = self._clock()
        if self._long_turn is call:
            self._long_turn = None
            self._turn.notify_all()
        self._seen_now(tenant)
        now = self._clock()
        self._usage[tenant] = (self._used(tenant, now) + cpu, now)
        mean = self._mean_call.get(tenant, cpu)
        self._mean_call[tenant] = mean + MEAN_WEIGHT * (cpu - mean)
        if len(self._usage) > 4 * len(self._calls) + 64:  # forget tenants idle for long
            for name in [t for t in self._usage if t not in self._calls]:
                if self._used(name, now) < 1e-3:
                    del self._usage[name]
                    self._mean_call.pop(name, None)
                    self._short_ended.pop(name, None)
                    self._quantum_at.pop(name, None)

    def _drop_short(self, tenant: str, *, wake: bool = True) -> None:
        left = self._short[tenant] - 1
        if left:
            self._short[tenant] = left
        else:
            del self._short[tenant]
        if wake and self._paused:
            self._turn.notify_all()

    def _used(self, tenant: str, now: float) -> float:
        used, at = self._usage.get(tenant, (0.0, now))
        return float(used * 0.5 ** ((now - at) / USAGE_HALF_LIFE_SECONDS))

    def _must_wait(self, call: _Call, now: float) -> bool:
        """A short call of a lighter tenant runs (or ended within NEIGHBOUR_GAP_SECONDS), or
        (another tenant active) another long call has the long turn."""
        mine = None
        for other in self._short.keys() | {
            t for t, at in self._short_ended.items() if now - at < NEIGHBOUR_GAP_SECONDS
        }:
            if other != call.tenant:
                if mine is None:  # with what this call has used so far
                    mine = self._used(call.tenant, now) + time.thread_time() - call.started
                if self._used(other, now) <= mine:
                    return True
        turn = self._long_turn
        return turn is not None and turn is not call and self._others_active(call.tenant, now)

    def _checkpoint(self, call: _Call) -> None:
        cpu = time.thread_time()
        if cpu < call.free_until:
            return
        if not call.long and cpu - call.started <= SHORT_CALL_SECONDS:
            return
        with self._lock:
            if not call.long:
                call.long = True
                self._drop_short(call.tenant)
            self._pause(call)

    def _pause(self, call: _Call) -> None:
        """Wait (lock held, released while waiting) as long as `_must_wait`, then take the long
        turn. Beside a neighbour that keeps calling, the paused tenant gets one quantum every
        QUANTUM_EVERY_SECONDS for one of its calls (the one with the long turn), and no pause
        lasts more than MAX_PAUSE_SECONDS."""
        now = self._clock()
        if self._must_wait(call, now):
            if self._long_turn is call:
                self._long_turn = None
                self._turn.notify_all()
            started = now
            self._paused += 1
            try:
                while now < started + MAX_PAUSE_SECONDS and self._must_wait(call, now):
                    last = self._quantum_at.get(call.tenant, started)
                    due = max(started, last) + QUANTUM_EVERY_SECONDS
                    if now >= due and self._long_turn in (None, call):
                        self._quantum_at[call.tenant] = now
                        break
                    wait = due - now
                    self._turn.wait(wait if 0 < wait < PAUSE_POLL_SECONDS else PAUSE_POLL_SECONDS)
                    now = self._clock()
            finally:
                self._paused -= 1
            if self._must_wait(call, now):  # a quantum (or the longest pause) is what ended it
                call.free_until = time.thread_time() + QUANTUM_SECONDS
            self.pauses += 1
            self.paused_seconds += now - started
        if self._long_turn is None:
            self._long_turn = call
