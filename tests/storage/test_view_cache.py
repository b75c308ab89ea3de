"""A replica's cache of pattern views (`storage.postgres._views`): what a read begun before a
drop of its pattern found is never kept, and the cache stays within its bounds: a count of
patterns, and bytes (docs/reliability.md, "Caches bounded in bytes")."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest

from pml_server.domain.limits import LIMITS
from pml_server.domain.lru import ENTRY_BYTES, decoded_bytes
from pml_server.domain.records import IntentRecord, PatternCounters, PatternRecord
from pml_server.domain.shown_intents import SHOWN_INTENTS
from pml_server.storage.postgres._oplog import committed_before
from pml_server.storage.postgres._views import (
    OWN_COMMITS_KEPT,
    VIEW_CACHE_BYTES,
    CachedView,
    ReplicaViewCache,
    view_weight,
)
from testing.memory import memory_held


def _view(pattern_id: str, usage: int, intent_ids: tuple[int, ...] = (1,)) -> CachedView:
    record = PatternRecord(
        id=pattern_id, code_hash="h", template="t", original_code="c", language="typescript",
        tools_used=(), params=(), parameter_schema_json="{}", capability_id="cap",
        first_seen_ms=0,
    )  # fmt: skip
    no_vector = np.zeros(0, dtype=np.float32)
    intents = [IntentRecord(i, pattern_id, "text", 1, 0, "m", no_vector) for i in intent_ids]
    return CachedView(record, PatternCounters(usage=usage), intents, len(intents))


def test_a_read_begun_before_a_drop_of_its_pattern_is_not_kept() -> None:
    cache = ReplicaViewCache(10)
    began = cache.generation()
    cache.drop([("t", "p")])  # a commit of this replica, or the follower, meanwhile
    cache.keep(began, [(("t", "p"), _view("p", 1)), (("t", "q"), _view("q", 1))])
    assert cache.get(("t", "p")) is None  # possibly read before the write: not kept
    assert cache.get(("t", "q")) is not None  # not dropped since: kept
    after = cache.generation()
    cache.keep(after, [(("t", "p"), _view("p", 2))])  # read after the drop: kept
    found = cache.get(("t", "p"))
    assert found is not None
    assert found.counters.usage == 2
    cache.drop([("t", "p")])
    assert cache.get(("t", "p")) is None


def test_the_follower_drops_other_replicas_rows_and_leaves_this_ones_commits() -> None:
    """docs/storage.md, Replicas: rows the follower reads as changed drop their patterns'
    views, but for this replica's own commits (each dropped its views once committed); an own
    commit the feed will not return again (visible in the snapshot it goes on from) is
    forgotten, and past `OWN_COMMITS_KEPT` unmet ones the rest are dropped as others'."""
    cache = ReplicaViewCache(10)
    cache.drop([("t", "own")], committed_by=105)
    fresh = cache.generation()
    cache.keep(fresh, [(("t", name), _view(name, 1)) for name in ("own", "other", "late")])
    seen = committed_before("104:110:104,107")
    assert (seen(105), seen(107), seen(110)) == (True, False, False)
    cache.drop_changed([(("t", "own"), 105), (("t", "other"), 106)])
    assert cache.get(("t", "own")) is not None
    assert cache.get(("t", "other")) is None
    cache.forget_commits(committed_before("104:110:104,105"))  # 105 in progress then: kept
    cache.drop_changed([(("t", "own"), 105)])
    assert cache.get(("t", "own")) is not None
    # 105 is visible in the snapshot the feed goes on from: forgotten, as the feed never
    # returns it again (were it returned, it would now be dropped)
    cache.forget_commits(seen)
    cache.drop_changed([(("t", "late"), 105)])
    assert cache.get(("t", "late")) is None
    for xid in range(OWN_COMMITS_KEPT + 1):
        cache.drop([("t", "x")], committed_by=1000 + xid)
    cache.keep(cache.generation(), [(("t", "own"), _view("own", 2))])
    cache.drop_changed([(("t", "own"), 1000 + OWN_COMMITS_KEPT)])
    assert cache.get(("t", "own")) is None  # not kept: dropped as another replica's


def test_the_cache_keeps_at_most_its_size_least_recently_used_out() -> None:
    cache = ReplicaViewCache(2)
    cache.keep(cache.generation(), [(("t", "a"), _view("a", 1)), (("t", "b"), _view("b", 1))])
    assert cache.get(("t", "a")) is not None  # a is now the most recently used
    cache.keep(cache.generation(), [(("t", "c"), _view("c", 1))])
    assert len(cache) == 2
    assert cache.get(("t", "b")) is None
    assert cache.get(("t", "a")) is not None
    assert ReplicaViewCache(0).get(("t", "a")) is None


def test_past_its_bound_of_drop_stamps_every_read_begun_before_is_refused() -> None:
    cache = ReplicaViewCache(2)
    began = cache.generation()
    cache.drop([("t", "a"), ("t", "b"), ("t", "c")])  # more stamps than the bound: cleared
    cache.keep(began, [(("t", "d"), _view("d", 1))])
    assert cache.get(("t", "d")) is None
    cache.keep(cache.generation(), [(("t", "d"), _view("d", 1))])
    assert cache.get(("t", "d")) is not None


def test_each_view_is_weighed_by_its_records_intents_and_entry() -> None:
    """The cache counts each view's `view_weight` (stored bytes through `decoded_bytes`, the
    code and intent texts in memory, the objects and the entry), and gives it back on a drop."""
    view = _view("p", 1, (1, 2, 3))
    record, counters = view.record, view.counters
    expected = ENTRY_BYTES + 320 + len("t") + len("p") + 8 * 3
    without_code = replace(record, template="", original_code="")
    expected += decoded_bytes(without_code.to_json()) + decoded_bytes(counters.to_json())
    expected += sys.getsizeof("t") + sys.getsizeof("c")  # the code: template and original
    expected += sum(decoded_bytes(i.to_json()) + sys.getsizeof(i.text) for i in view.intents)
    assert view_weight(("t", "p"), view) == expected
    cache = ReplicaViewCache(10)
    cache.keep(cache.generation(), [(("t", "p"), view), (("t", "q"), _view("q", 1))])
    assert cache.weight == expected + view_weight(("t", "q"), _view("q", 1))
    cache.drop([("t", "p")])
    assert cache.weight == view_weight(("t", "q"), _view("q", 1))


def test_past_its_bytes_the_least_recently_used_views_go_first() -> None:
    weight = view_weight(("t", "a"), _view("a", 1))
    cache = ReplicaViewCache(100, bound_bytes=3 * weight)
    for name in "abc":
        cache.keep(cache.generation(), [(("t", name), _view(name, 1))])
    assert cache.get(("t", "a")) is not None  # a is now the most recently used
    cache.keep(cache.generation(), [(("t", "d"), _view("d", 1))])
    assert len(cache) == 3  # far below the count bound: the bytes evicted b
    assert cache.get(("t", "b")) is None
    assert all(cache.get(("t", n)) is not None for n in "acd")
    assert cache.weight <= 3 * weight
    # a view heavier than the whole bound is not kept, and pushes nothing out
    heavy = _view("e", 1, tuple(range(40)))
    cache.keep(cache.generation(), [(("t", "e"), heavy)])
    assert cache.get(("t", "e")) is None
    assert len(cache) == 3


def _longest_view(n: int, code: str) -> CachedView:
    """A view of the longest code (template and original code alike) and its shown intents of
    the longest text, each string distinct (none shared between views)."""
    code = f"{n}{code}"[: LIMITS.code.bound]
    record = PatternRecord(
        id=f"pat_{n}", code_hash="h", template=code, original_code=code[::-1],
        language="typescript", tools_used=("a",), params=(), parameter_schema_json="{}",
        capability_id="cap", first_seen_ms=0,
    )  # fmt: skip
    no_vector = np.zeros(0, dtype=np.float32)
    intents = [
        IntentRecord(i, f"pat_{n}", f"{n} {i} {code}"[: LIMITS.intent.bound], 1, 0, "m", no_vector)
        for i in range(SHOWN_INTENTS)
    ]
    return CachedView(record, PatternCounters(usage=n), intents, len(intents))


# The code a client can send most of: ASCII (one byte a character in memory and stored), and
# ASCII with one character beyond the BMP (four bytes a character in memory, one stored).
_CODES = {
    "ascii": "const r = await mcp.read_file({path: 'a.json'}); " * 6_000,
    "ascii and one emoji": "\U0001f600" + "const r = await mcp.read_file({path: 'a'}); " * 6_000,
}


@pytest.mark.parametrize("shape", sorted(_CODES))
def test_the_cache_holds_at_most_its_bytes_of_views_of_the_longest_code(shape: str) -> None:
    """Views of the longest code and intents, past the bound twice over: tracemalloc sees the
    cache hold less than 90% of its bound (counted by entries only, 10,000 such views would
    hold gigabytes)."""
    bound = VIEW_CACHE_BYTES
    cache = ReplicaViewCache(10_000)
    with memory_held() as held:
        count = 0
        while count * view_weight(("t", "pat_0"), _longest_view(0, _CODES[shape])) < 2 * bound:
            view = _longest_view(count, _CODES[shape])
            cache.keep(cache.generation(), [(("t", view.record.id), view)])
            count += 1
        del view
    assert held.nbytes <= 0.9 * bound, (
        f"{held.nbytes} bytes held by {len(cache)} views; the bound is {bound}"
    )
    assert 0 < len(cache) < count
    assert cache.weight <= bound
