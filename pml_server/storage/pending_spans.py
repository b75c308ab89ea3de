"""OTLP spans held until their execution's root span arrives (docs/capture.md, "Runs split
over several Exports").

An OTel SDK's batch processor exports a span when it ends, so the tool-call spans of a run
longer than its flush interval reach pml in an Export before the run's `invoke_agent` span.
Such spans are written to the store (family `meta`, keys `otlp_pending/<tenant><trace id><span
id>`, value: the received time in ms as a u64, then the span's protobuf bytes) before the Export
is answered, so an acknowledged span survives a restart, and read back when a later Export of
the same trace brings an execution span.

Bounds: at most `max_spans` held per tenant (an Export that would pass it has that trace's
spans rejected, counted as overflow), each trace kept at most `max_age_seconds` after its
first held span (then deleted, counted as expired). The per-tenant count and ages are kept in
memory, rebuilt from the store the first time a tenant is seen: with a shared (PostgreSQL)
store each replica counts and expires the rows it wrote and those present when it first saw
the tenant, so the bound is per replica there; which traces have held spans is asked of the
store there (another replica may have held them).

Runs recently mapped are remembered (in memory, per tenant, for `max_age_seconds`, at most
`MAPPED_SPANS` span ids, the oldest traces forgotten first): the spans of each trace at or
below a mapped execution span, and each captured execution's call spans. A span arriving after
its run was mapped (the MCP server's own span of a call, exported by its own process after the
agent's Export; an Export sent again by a retry; a call that ended after its run's root span,
rejected for it) is then known as part of that run instead of being held until it expires.
After a restart, or on another replica, it is held as before.

A root span that arrives with no call under it may have been sent before its calls (an exporter
sending each span alone over concurrent requests): it is held **settling** for
`settle_seconds`, its held form marked with the attribute `pml.otlp.settling`, and the calls of
its trace arriving meanwhile are held beside it; once the window has passed, the server's
settle thread (or an Export of the same trace) maps them together (`matured`). Which traces have a
settling root is kept in memory per tenant, rebuilt from the store with the rest
(`_state`; `open_tenants` reads every tenant's after a start).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1 import trace_pb2

from pml_server.storage.keys import CF_META, from_u64, split_tenant, tenant_prefix, u64
from pml_server.storage.seam import Op, StoreBackend

_PREFIX = b"otlp_pending/"
# Span ids of recently mapped runs remembered per tenant (about 2 MB): at 1,000 spans a second,
# the last 20 s, longer than the SDK batch processor's 5 s delay that late spans wait out.
MAPPED_SPANS = 20_000
_TRACE_ID_BYTES = 16
_SPAN_ID_BYTES = 8
_MARKER_SPAN_ID = bytes(_SPAN_ID_BYTES)  # `pml_server.otel.INCOMPLETE_SPAN_ID`
# The attribute key of a settling root's held form (`pml_server.otel.SETTLING`). Held calls
# carry texts (arguments, names) that may hold the same bytes: `_is_settling` reads the key.
_SETTLING = "pml.otlp.settling"
_SETTLING_BYTES = _SETTLING.encode()
_PAGE = 512  # held spans read at once when a tenant is first seen


def _is_settling(data: bytes) -> bool:
    """Whether a held span's protobuf bytes are a settling root's held form: it carries the
    `_SETTLING` attribute (docs/capture.md, "A root span that arrives first"). The bytes alone
    were taken for it, and a held call whose arguments named them was kept out of its run."""
    if _SETTLING_BYTES not in data:
        return False  # (the usual held call: not parsed)
    span = trace_pb2.Span()
    try:
        span.ParseFromString(data)
    except DecodeError:
        return False  # (not a held form: read back, the mapping refuses it)
    return any(kv.key == _SETTLING for kv in span.attributes)


@dataclass
class _Trace:
    first_ms: int
    span_ids: set[bytes] = field(default_factory=set)


@dataclass
class _Tenant:
    traces: dict[bytes, _Trace] = field(default_factory=dict)
    spans: int = 0
    # (trace id, span id) of each settling root -> when it was held (ms).
    settling: dict[tuple[bytes, bytes], int] = field(default_factory=dict)
    # The latest of the times above (`_caught_up`).
    latest_ms: int = 0


def _caught_up(state: _Tenant, now: int) -> int:
    """`now`, once every time `state` holds that is later than it is lowered to it: after the
    wall clock was set back (or spans held by a replica whose clock is ahead), a span is aged
    from when this process first saw now before its time, so a settling root matures and a
    trace expires one window later, not when the clock has caught up again (docs/capture.md,
    "Runs split over several Exports")."""
    if now < state.latest_ms:
        for trace in state.traces.values():
            trace.first_ms = min(trace.first_ms, now)
        for key, at in state.settling.items():
            state.settling[key] = min(at, now)
        state.latest_ms = now
    return now


@dataclass
class MappedTrace:
    """A trace with runs mapped recently: the spans at or below their execution spans, and
    each execution span's call spans."""

    at_ms: int
    spans: set[bytes] = field(default_factory=set)
    runs: dict[bytes, frozenset[bytes]] = field(default_factory=dict)
    # The tool-call spans among `spans` (a span arriving below one is that call seen twice;
    # one arriving below another of `spans` is a call that came after its run was mapped).
    # A subset of `spans`: counted with them.
    calls: set[bytes] = field(default_factory=set)
    # Links of spans refused (`otlp_pending_spans`) when no marker could be held for them.
    lost: set[bytes] = field(default_factory=set)
    # The conversations its runs named (at most two, as stand-ins: `otel._mapping._named`),
    # for its runs mapped later (docs/ranking.md, Sessions).
    conversations: frozenset[str] = frozenset()


@dataclass(frozen=True)
class HeldSpan:
    span_id: bytes
    received_ms: int
    data: bytes  # the span's protobuf bytes


class PendingSpans:
    def __init__(
        self,
        store: StoreBackend,
        max_spans: int,
        max_age_seconds: float,
        clock_ms: Callable[[], int],
        settle_seconds: float = 5.0,
    ) -> None:
        self._store = store
        self.max_spans = max_spans
        self._max_age_ms = int(max_age_seconds * 1000)
        self.settle_seconds = settle_seconds
        self._settle_ms = int(settle_seconds * 1000)
        self._clock_ms = clock_ms
        self._tenants: dict[str, _Tenant] = {}
        self._lock = threading.Lock()
        # One Export of a tenant at a time reads, merges and rewrites its held spans.
        self._tenant_locks: dict[str, threading.Lock] = {}
        # Per tenant, oldest first, with the count of span ids they hold.
        self._mapped: dict[str, tuple[OrderedDict[bytes, MappedTrace], list[int]]] = {}

    def tenant_lock(self, tenant: str) -> threading.Lock:
        with self._lock:
            return self._tenant_locks.setdefault(tenant, threading.Lock())

    def _key(self, tenant: str, trace_id: bytes, span_id: bytes = b"") -> bytes:
        return _PREFIX + tenant_prefix(tenant) + trace_id + span_id

    def _state(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = _Tenant()
            prefix = self._key(tenant, b"")
            for key, value in self._rows(prefix):
                rest = key[len(prefix) :]
                if len(rest) != _TRACE_ID_BYTES + _SPAN_ID_BYTES:
                    continue
                trace_id, span_id = rest[:_TRACE_ID_BYTES], rest[_TRACE_ID_BYTES:]
                received = from_u64(value[:8])
                trace = state.traces.setdefault(trace_id, _Trace(received))
                trace.first_ms = min(trace.first_ms, received)
                state.latest_ms = max(state.latest_ms, received)
                trace.span_ids.add(span_id)
                state.spans += 1
                if _is_settling(value[8:]):
                    # its window runs from now, by this process's clock: the root may have
                    # been held by another replica, whose clock may be minutes apart (as in
                    # `load`; docs/capture.md, "Runs split over several Exports")
                    state.settling[(trace_id, span_id)] = self._clock_ms()
            with self._lock:
                self._tenants[tenant] = state
        return state

    def _rows(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The rows under `prefix`, a page at a time, with the writes still queued (a tenant is
        first seen while others' captures write: `scan_stored` refuses to run then, and `scan`
        alone would hold every held span of the tenant at once)."""
        start = prefix
        while rows := self._store.scan(CF_META, prefix, start=start, limit=_PAGE):
            yield from rows
            if len(rows) < _PAGE:
                return
            start = rows[-1][0] + b"\x00"

    def open_tenants(self) -> None:
        """Read the held spans of every tenant the store has some for (after a start: the
        settling roots among them are then `settling_tenants`); one short scan per tenant."""
        start = _PREFIX
        while rows := self._store.scan(CF_META, _PREFIX, start=start, limit=1):
            tenant, _ = split_tenant(rows[0][0][len(_PREFIX) :])
            with self.tenant_lock(tenant):
                self._state(tenant)
            # Past every key of this tenant: its trace and span ids are 24 bytes.
            start = self._key(tenant, b"\xff" * (_TRACE_ID_BYTES + _SPAN_ID_BYTES + 1))

    def settling_tenants(self) -> list[str]:
        """The tenants this process knows to hold settling roots."""
        with self._lock:
            return [t for t, state in self._tenants.items() if state.settling]

    def settling(self, span: HeldSpan) -> bool:
        """Whether `span` is a settling root whose calls may still arrive."""
        return _is_settling(span.data) and span.received_ms > self._clock_ms() - self._settle_ms

    def matured(self, tenant: str) -> list[bytes]:
        """The traces of `tenant` with a settling root held longer than the window."""
        state = self._state(tenant)
        cutoff = _caught_up(state, self._clock_ms()) - self._settle_ms
        settling = state.settling
        return list(dict.fromkeys(t for (t, _), at in settling.items() if at <= cutoff))

    def held(self, tenant: str) -> int:
        """Spans held for `tenant` (this process's view)."""
        return self._state(tenant).spans

    def traces_held(self, tenant: str, trace_ids: Iterable[bytes]) -> list[bytes]:
        """Those of `trace_ids` with held spans. A shared store is asked for the traces this
        process does not know (another replica may have held them): one query each."""
        state = self._state(tenant)
        known = [t for t in trace_ids if t in state.traces]
        if not self._store.shared:
            return known
        others = [
            t
            for t in trace_ids
            if t not in state.traces and self._store.scan(CF_META, self._key(tenant, t), limit=1)
        ]
        return known + others

    def load(self, tenant: str, trace_id: bytes) -> list[HeldSpan]:
        """The spans held for `trace_id` (called under the tenant's lock). Spans this process
        counted that the store no longer has (another replica captured their run and deleted
        them) are forgotten: not counted against the bound, not settling."""
        prefix = self._key(tenant, trace_id)
        state = self._state(tenant)
        now = _caught_up(state, self._clock_ms())
        rows = [(key[len(prefix) :], value) for key, value in self._store.scan(CF_META, prefix)]
        for span_id, value in rows:
            if (trace_id, span_id) not in state.settling and _is_settling(value[8:]):
                # another replica's settling root, first read here: its window runs from
                # now, as its time is by that replica's clock (docs/capture.md, "Runs split
                # over several Exports")
                read = state.traces.setdefault(trace_id, _Trace(now))
                if span_id not in read.span_ids:
                    read.span_ids.add(span_id)
                    state.spans += 1
                state.settling[(trace_id, span_id)] = now
        # a settling root's time as this process ages it (`_caught_up`)
        since = state.settling
        held = [
            HeldSpan(span_id, since.get((trace_id, span_id), from_u64(value[:8])), value[8:])
            for span_id, value in rows
        ]
        trace = state.traces.get(trace_id)
        if trace is not None and (gone := trace.span_ids - {h.span_id for h in held}):
            for span_id in gone:
                state.settling.pop((trace_id, span_id), None)
            trace.span_ids -= gone
            state.spans -= len(gone)
            if not trace.span_ids:
                del state.traces[trace_id]
        return held

    def expire(self, tenant: str) -> list[tuple[bytes, list[HeldSpan]]]:
        """Delete the traces held longer than the age limit (but those with a settling root);
        returns them with the spans deleted (a trace's marker of refused spans, span id 0,
        among them)."""
        state = self._state(tenant)
        cutoff = _caught_up(state, self._clock_ms()) - self._max_age_ms
        # A trace with a settling root is captured once its window passes (`matured`), never
        # expired before: its spans were all held while the root was.
        settling = {trace_id for trace_id, _ in state.settling}
        old = [
            t for t, trace in state.traces.items() if trace.first_ms <= cutoff and t not in settling
        ]
        ops: list[Op] = []
        expired: list[tuple[bytes, list[HeldSpan]]] = []
        for trace_id in old:
            prefix = self._key(tenant, trace_id)
            spans = []
            for key, value in self._store.scan(CF_META, prefix):
                ops.append((CF_META, key, None))
                spans.append(HeldSpan(key[len(prefix) :], from_u64(value[:8]), value[8:]))
            expired.append((trace_id, spans))
        if ops:
            self._store.write(ops)
        for trace_id in old:
            for span_id in state.traces.pop(trace_id).span_ids:
                state.settling.pop((trace_id, span_id), None)
                state.spans -= 1
        return expired

    def room(self, tenant: str) -> int:
        return max(0, self.max_spans - self._state(tenant).spans)

    def update(
        self,
        tenant: str,
        hold: Sequence[tuple[bytes, bytes, bytes]],
        release: Sequence[tuple[bytes, bytes]],
    ) -> None:
        """Write `hold` ((trace id, span id, span bytes), durable when this returns) and delete
        `release` ((trace id, span id)) in one batch."""
        state = self._state(tenant)
        now = _caught_up(state, self._clock_ms())
        state.latest_ms = max(state.latest_ms, now)
        ops: list[Op] = [(CF_META, self._key(tenant, t, s), None) for t, s in release]
        ops += [(CF_META, self._key(tenant, t, s), u64(now) + data) for t, s, data in hold]
        if not ops:
            return
        self._store.write(ops)
        for trace_id, span_id in release:
            trace = state.traces.get(trace_id)
            state.settling.pop((trace_id, span_id), None)
            if trace is not None and span_id in trace.span_ids:
                trace.span_ids.discard(span_id)
                state.spans -= 1
                if not trace.span_ids:
                    del state.traces[trace_id]
        for trace_id, span_id, data in hold:
            trace = state.traces.setdefault(trace_id, _Trace(now))
            if span_id not in trace.span_ids:
                trace.span_ids.add(span_id)
                state.spans += 1
            if _is_settling(data):
                state.settling[(trace_id, span_id)] = now

    def mapped(self, tenant: str, trace_id: bytes) -> MappedTrace | None:
        """What this process remembers of `trace_id`'s runs mapped less than
        `max_age_seconds` ago (called under the tenant's lock)."""
        traces, _ = self._mapped_of(tenant)
        return traces.get(trace_id)

    def remember(
        self,
        tenant: str,
        trace_id: bytes,
        spans: set[bytes],
        runs: dict[bytes, frozenset[bytes]],
        conversations: frozenset[str] = frozenset(),
        calls: Iterable[bytes] = (),
    ) -> None:
        """Remember runs of `trace_id` just mapped (`spans`: at or below their execution spans;
        `runs`: each execution span's call spans; `conversations`: those the trace's runs
        named, which include those remembered before; `calls`: the tool-call spans among
        `spans`). Called under the tenant's lock."""
        self._remember(tenant, trace_id, spans, runs, set(), conversations, set(calls) & spans)

    def remember_lost(self, tenant: str, trace_id: bytes, links: set[bytes]) -> None:
        """Remember that spans of `trace_id` were refused and no marker could be held for
        them (the tenant's held spans at the bound): `links` reject the run they belonged to
        when it arrives in this process. Called under the tenant's lock."""
        self._remember(tenant, trace_id, set(), {}, links)

    def _remember(
        self,
        tenant: str,
        trace_id: bytes,
        spans: set[bytes],
        runs: dict[bytes, frozenset[bytes]],
        lost: set[bytes],
        conversations: frozenset[str] = frozenset(),
        calls: Iterable[bytes] = (),
    ) -> None:
        traces, count = self._mapped_of(tenant)
        known = traces.pop(trace_id, None) or MappedTrace(0)
        known.at_ms = self._clock_ms()  # kept while the trace goes on (re-inserted last)
        count[0] -= len(known.spans) + len(known.lost)
        known.spans |= spans
        known.calls.update(calls)
        known.lost |= lost
        known.conversations = frozenset(sorted(known.conversations | conversations)[:2])
        for span_id, calls in runs.items():  # a part sent again adds nothing
            known.runs[span_id] = known.runs.get(span_id, frozenset()) | calls
        traces[trace_id] = known  # the most recent last
        count[0] += len(known.spans) + len(known.lost)
        while count[0] > MAPPED_SPANS and traces:
            oldest = traces.popitem(last=False)[1]
            count[0] -= len(oldest.spans) + len(oldest.lost)

    def _mapped_of(self, tenant: str) -> tuple[OrderedDict[bytes, MappedTrace], list[int]]:
        with self._lock:
            traces, count = self._mapped.setdefault(tenant, (OrderedDict(), [0]))
        cutoff = self._clock_ms() - self._max_age_ms
        while traces:
            trace_id, oldest = next(iter(traces.items()))
            if oldest.at_ms > cutoff:
                break
            count[0] -= len(oldest.spans) + len(oldest.lost)
            del traces[trace_id]
        return traces, count
