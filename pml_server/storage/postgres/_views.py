"""A replica's cache of the pattern views Suggest shows: each pattern's record, counters and
shown intents (without vectors, domain/shown_intents.py), so a Suggest ranked in the core
answers without a database round trip once its patterns have been read.

Freshness. An entry is dropped when this replica commits a batch writing the pattern's record,
counters or intents (`PostgresStore.watch_commits`, before the capture is answered: a replica
reads its own writes at once), and when the op log follower reads what other replicas wrote
(pattern, counters and intent rows changed since its last snapshot, intents removed by the op
log): another replica's write shows here within the follower's lag. The follower meets this
replica's own commits in that feed too: their rows are left alone (`drop_changed`), since the
commit dropped them once visible and a view read since is current (dropped again, the next
Suggest of the pattern read it again). A fill races with drops: a
read that began before a drop of its pattern may have read the row as it was, so it is not
kept (each drop advances a generation and stamps the pattern with it; a fill keeps only
patterns not stamped after the generation its read began at).

Bounded: at most `size` patterns and `VIEW_CACHE_BYTES` of them (`view_weight`: a pattern's
code goes up to 256 KiB, its shown intents up to 4,096 characters each), least recently used
first out (docs/reliability.md, "Caches bounded in bytes"); the drop stamps are bounded by
`size` (past it they are cleared and every read begun before is refused), the ids of this
replica's commits the follower has not met yet by `OWN_COMMITS_KEPT` (past it they are
forgotten, and the follower drops their rows as another replica's).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from pml_server.domain.limits import MIB
from pml_server.domain.lru import ENTRY_BYTES, Lru, decoded_bytes
from pml_server.storage.repo import ShownView

PatternKey = tuple[str, str]  # (tenant, pattern id)
CachedView = ShownView

# What the cache may hold, in estimated bytes (`view_weight`), whatever `size` allows: a view
# of a pattern as captures write them (a 2 KB record, 3 intents) counts about 14 KB, so about
# 9,000 of them fit; a view of the longest code and intents counts about 1 MB (docs/reliability.md,
# "Caches bounded in bytes").
VIEW_CACHE_BYTES = 128 * MIB
# The key's tuple and its two strings' headers, the view's tuple and its list of intents.
_VIEW_OBJECTS = 320
# This replica's commits the follower has not met in its change feed yet (a follower cut off
# from the database meets none): forgotten past this many.
OWN_COMMITS_KEPT = 65_536


def view_weight(key: PatternKey, view: CachedView) -> int:
    """An upper estimate of the bytes a cached view keeps alive: its record's, counters' and
    intents' stored bytes (encoded again) through `decoded_bytes`, but the record's code (the
    template and the original, up to 256 KiB each) by its size in memory instead, one, two or
    four bytes a character by its widest (`decoded_bytes` takes one byte a character, and
    counts the code's brackets and quotes as objects); the intents' texts by their size in
    memory besides; the view's objects and the entry."""
    record = view.record
    size = ENTRY_BYTES + _VIEW_OBJECTS + len(key[0]) + len(key[1]) + 8 * len(view.intents)
    without_code = replace(record, template="", original_code="")
    size += decoded_bytes(without_code.to_json()) + decoded_bytes(view.counters.to_json())
    size += sys.getsizeof(record.template) + sys.getsizeof(record.original_code)
    for intent in view.intents:
        size += decoded_bytes(intent.to_json()) + sys.getsizeof(intent.text)
    return size


class ReplicaViewCache:
    """The views of one replica over the shared store (see the module docstring); the engine's
    own cache, for a store it alone writes, is `service._views.ViewCache`."""

    def __init__(self, size: int, bound_bytes: int = VIEW_CACHE_BYTES) -> None:
        self._size = size
        # key -> (the view, its weight): bounded by bytes here, by count in `keep`
        self._entries: Lru[PatternKey, tuple[CachedView, int]] = Lru(
            bound_bytes, weigh=lambda _key, entry: entry[1]
        )
        self._dropped_at: dict[PatternKey, int] = {}
        self._generation = 0
        self._floor = 0  # reads begun before this generation are not kept
        # ids of this replica's transactions whose writes `drop` dropped once committed
        self._own_commits: set[int] = set()
        self._lock = threading.Lock()

    def generation(self) -> int:
        """Taken before a read whose answer is then `keep`-ed."""
        with self._lock:
            return self._generation

    def get(self, key: PatternKey) -> CachedView | None:
        """The pattern's view when it is cached."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def keep(self, began_at: int, views: Iterable[tuple[PatternKey, CachedView]]) -> None:
        """Cache views read since generation `began_at`, but none of a pattern dropped since."""
        if self._size <= 0:
            return
        weighed = [(key, view, view_weight(key, view)) for key, view in views]  # not locked
        with self._lock:
            if began_at < self._floor:
                return
            for key, view, weight in weighed:
                if self._dropped_at.get(key, -1) > began_at:
                    continue
                self._entries.put(key, (view, weight))
                while len(self._entries) > self._size:
                    self._entries.pop(next(iter(self._entries)))

    def drop(self, keys: Iterable[PatternKey], committed_by: int | None = None) -> None:
        """Drop these patterns' views; `committed_by`: this replica's transaction that wrote
        them and has committed (its rows in the follower's feed are then left alone)."""
        with self._lock:
            if committed_by is not None and len(self._own_commits) < OWN_COMMITS_KEPT:
                self._own_commits.add(committed_by)
            self._generation += 1
            for key in keys:
                self._entries.pop(key)
                self._dropped_at[key] = self._generation
            if len(self._dropped_at) > self._size:
                self._dropped_at.clear()
                self._floor = self._generation

    def drop_changed(self, written: Iterable[tuple[PatternKey, int]]) -> None:
        """Drop the patterns of rows the follower read as changed, each with the transaction
        that wrote it, but for those this replica committed (dropped at their commit)."""
        with self._lock:
            others = {key for key, xid in written if xid not in self._own_commits}
        if others:
            self.drop(others)

    def forget_commits(self, seen: Callable[[int], bool]) -> None:
        """Forget this replica's commits the follower's feed will not return again (`seen`:
        visible in the snapshot it goes on from)."""
        with self._lock:
            self._own_commits = {xid for xid in self._own_commits if not seen(xid)}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def weight(self) -> int:
        """The estimated bytes held."""
        with self._lock:
            return self._entries.weight
