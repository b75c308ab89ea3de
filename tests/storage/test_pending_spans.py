"""`storage.pending_spans.PendingSpans` against both backends (the embedded RocksDB store and
a real throwaway PostgreSQL cluster): held spans and settling roots rebuilt from the store,
and a tenant first seen while other writes are in flight."""

from __future__ import annotations

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from pml_server.otel import SETTLING
from pml_server.storage.keys import CF_META
from pml_server.storage.pending_spans import HeldSpan, PendingSpans
from tests.storage.conftest import Opener

TRACE = bytes(range(1, 17))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _span(n: int) -> bytes:
    return bytes([0] * 7 + [n])


def _settling_root() -> bytes:
    """A settling root's held form (span 1 of `TRACE`): marked with the `SETTLING` attribute."""
    marked = KeyValue(key=SETTLING, value=AnyValue(bool_value=True))
    return Span(trace_id=TRACE, span_id=_span(1), attributes=[marked]).SerializeToString()


def test_the_settling_attribute_is_the_one_the_mapping_writes() -> None:
    from pml_server.storage import pending_spans

    assert pending_spans._SETTLING == SETTLING


def test_a_tenant_first_seen_while_other_writes_are_queued(opener: Opener) -> None:
    """A tenant's held spans are read from the store the first time it exports. Before, that
    read refused to run while any write to the same column family was queued (another
    tenant's capture, its stats or held spans): the Export failed with INTERNAL."""
    store = opener()
    pending = PendingSpans(store, 100, 600.0, Clock())
    pending.update("a", [(TRACE, _span(1), b"\x0a\x00")], [])
    with store.writes_held():
        store.submit([(CF_META, b"stats/other", b"{}")])  # queued, held back
        assert pending.held("b") == 0
        assert pending.held("a") == 1


def test_settling_roots_mature_and_survive_a_reopen(opener: Opener) -> None:
    store = opener()
    clock = Clock()
    pending = PendingSpans(store, 100, 600.0, clock, settle_seconds=5.0)
    root = _settling_root()
    # A held call whose arguments name the mark: not a settling root (only the attribute is).
    named = KeyValue(key="gen_ai.tool.call.arguments", value=AnyValue(string_value=SETTLING))
    call = Span(trace_id=TRACE, span_id=_span(2), attributes=[named]).SerializeToString()
    pending.update("t", [(TRACE, _span(1), root), (TRACE, _span(2), call)], [])
    assert pending.settling_tenants() == ["t"]
    assert pending.matured("t") == []
    (held_root, held_call) = sorted(pending.load("t", TRACE), key=lambda s: s.span_id)
    assert pending.settling(held_root)
    assert not pending.settling(held_call)
    clock.ms += 5_000
    assert pending.matured("t") == [TRACE]
    assert not pending.settling(held_root)
    clock.ms += 600_000
    assert pending.expire("t") == []  # a settling root's trace waits for its capture
    store.close()

    again = PendingSpans(opener(), 100, 600.0, clock, settle_seconds=5.0)
    assert again.settling_tenants() == []  # nothing read yet
    again.open_tenants()
    assert again.settling_tenants() == ["t"]
    # its window runs again from when this process read it (it may be another replica's,
    # held by a clock minutes apart): one window after the start
    assert again.matured("t") == []
    clock.ms += 5_000
    assert again.matured("t") == [TRACE]
    assert again.held("t") == 2
    again.update("t", [], [(TRACE, _span(1)), (TRACE, _span(2))])
    assert (again.held("t"), again.matured("t"), again.settling_tenants()) == (0, [], [])


def test_open_tenants_finds_every_tenant_with_held_spans(opener: Opener) -> None:
    store = opener()
    pending = PendingSpans(store, 100, 600.0, Clock())
    names = ["a", "ab", "b", "\u00e9t\u00e9", "z" * 200]
    for name in names:
        pending.update(name, [(TRACE, _span(1), b"\x0a\x00"), (TRACE, _span(2), b"")], [])
    store.close()
    again = PendingSpans(opener(), 100, 600.0, Clock())
    seen: list[str] = []
    original = again._state

    def spy(tenant: str) -> object:
        seen.append(tenant)
        return original(tenant)

    again._state = spy  # type: ignore[method-assign, assignment]
    again.open_tenants()
    assert sorted(set(seen)) == sorted(names)
    assert all(isinstance(s, HeldSpan) for s in again.load("ab", TRACE))


def test_spans_another_replica_deleted_are_forgotten_when_read(opener: Opener) -> None:
    """Two processes over one store: the second captures a run whose root the first held
    settling and deletes its spans. The first, reading the trace, forgets them (before this,
    its settle thread found the trace matured forever and read it again and again)."""
    store = opener()
    clock = Clock()
    first = PendingSpans(store, 100, 600.0, clock, settle_seconds=1.0)
    second = PendingSpans(store, 100, 600.0, clock, settle_seconds=1.0)
    root = _settling_root()
    first.update("t", [(TRACE, _span(1), root), (TRACE, _span(2), b"\x0a\x00")], [])
    clock.ms += 1_000
    assert first.matured("t") == [TRACE]
    assert len(second.load("t", TRACE)) == 2
    second.update("t", [], [(TRACE, _span(1)), (TRACE, _span(2))])  # its capture
    assert first.load("t", TRACE) == []
    assert (first.matured("t"), first.held("t"), first.settling_tenants()) == ([], 0, [])


def test_a_clock_stepped_back_neither_holds_spans_nor_a_settling_root_for_the_step(
    opener: Opener,
) -> None:
    """The wall clock set back (an NTP step, a clock set wrong then fixed, another replica's
    clock ahead): spans held before it bear times after now. They are aged from when this
    process first sees now before them (docs/capture.md, "Runs split over several Exports"):
    a settling root matures `settle_seconds` later and a held trace expires `max_age_seconds`
    later, not once the clock has caught up again (an hour, a day, a year on)."""
    store = opener()
    clock = Clock()
    for back_ms in (3_600_000, 86_400_000, 365 * 86_400_000):
        tenant = f"t{back_ms}"
        clock.ms += 2 * back_ms
        pending = PendingSpans(store, 100, 600.0, clock, settle_seconds=5.0)
        other = bytes(range(2, 18))
        pending.update(tenant, [(TRACE, _span(1), _settling_root()), (other, _span(3), b"")], [])
        clock.ms -= back_ms
        assert pending.matured(tenant) == []  # the window starts again now
        (held,) = pending.load(tenant, TRACE)
        assert pending.settling(held)
        clock.ms += 5_000
        assert pending.matured(tenant) == [TRACE]
        (held,) = pending.load(tenant, TRACE)
        assert not pending.settling(held)
        clock.ms += 600_000
        assert [trace for trace, _ in pending.expire(tenant)] == [other]
        # a restart with the clock still behind: the same, from the restart on
        pending.update(tenant, [(other, _span(3), b"")], [])
        clock.ms -= back_ms
        store.close()
        store = opener()
        again = PendingSpans(store, 100, 600.0, clock, settle_seconds=5.0)
        again.open_tenants()
        assert again.expire(tenant) == []
        clock.ms += 600_000
        assert [trace for trace, _ in again.expire(tenant)] == [other]
    store.close()


def test_a_settling_root_another_replica_held_settles_by_this_ones_clock(
    opener: Opener,
) -> None:
    """Two replicas whose clocks differ by ten minutes: the root the one behind holds settling
    is, to the one ahead, ten minutes old. Read from the store, it was taken as settled at
    once, mapped with the first call to arrive and the run's other calls held until they
    expired: the run was never captured. It is aged from when this replica first reads it."""
    store = opener()
    behind, ahead = Clock(), Clock()
    ahead.ms += 600_000
    first = PendingSpans(store, 100, 600.0, behind, settle_seconds=5.0)
    second = PendingSpans(store, 100, 600.0, ahead, settle_seconds=5.0)
    assert second.held("t") == 0  # the tenant seen before the root is held
    first.update("t", [(TRACE, _span(1), _settling_root())], [])
    (held,) = second.load("t", TRACE)
    assert second.settling(held)
    assert second.settling_tenants() == ["t"]
    assert second.matured("t") == []
    ahead.ms += 5_000
    assert second.matured("t") == [TRACE]
    (held,) = second.load("t", TRACE)
    assert not second.settling(held)
    first.update("t", [], [(TRACE, _span(1))])  # the first replica captured the run meanwhile
    assert second.load("t", TRACE) == []
    assert (second.matured("t"), second.held("t"), second.settling_tenants()) == ([], 0, [])
