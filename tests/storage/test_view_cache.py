"""A replica's cache of pattern views (`storage.postgres._views`): what a read begun before a
drop of its pattern found is never kept, and the cache stays within its bound."""

from __future__ import annotations

import numpy as np

from pml_server.domain.records import IntentRecord, PatternCounters, PatternRecord
from pml_server.storage.postgres._views import CachedView, ReplicaViewCache


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
