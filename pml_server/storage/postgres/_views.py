"""A replica's cache of the pattern views Suggest shows: each pattern's record, counters and
shown intents (without vectors, domain/shown_intents.py), so a Suggest ranked in the core
answers without a database round trip once its patterns have been read.

Freshness. An entry is dropped when this replica commits a batch writing the pattern's record,
counters or intents (`PostgresStore.watch_commits`, before the capture is answered: a replica
reads its own writes at once), and when the op log follower reads what other replicas wrote
(pattern, counters and intent rows changed since its last snapshot, intents removed by the op
log): another replica's write shows here within the follower's lag. A fill races with drops: a
read that began before a drop of its pattern may have read the row as it was, so it is not
kept (each drop advances a generation and stamps the pattern with it; a fill keeps only
patterns not stamped after the generation its read began at).

Bounded: at most `size` patterns, least recently used first out; the drop stamps are bounded
the same way (past the bound they are cleared and every read begun before is refused).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from pml_server.domain.lru import Lru
from pml_server.storage.repo import ShownView

PatternKey = tuple[str, str]  # (tenant, pattern id)
CachedView = ShownView


class ReplicaViewCache:
    """The views of one replica over the shared store (see the module docstring); the engine's
    own cache, for a store it alone writes, is `service._views.ViewCache`."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: Lru[PatternKey, CachedView] = Lru(max(size, 0))
        self._dropped_at: dict[PatternKey, int] = {}
        self._generation = 0
        self._floor = 0  # reads begun before this generation are not kept
        self._lock = threading.Lock()

    def generation(self) -> int:
        """Taken before a read whose answer is then `keep`-ed."""
        with self._lock:
            return self._generation

    def get(self, key: PatternKey) -> CachedView | None:
        """The pattern's view when it is cached."""
        with self._lock:
            return self._entries.get(key)

    def keep(self, began_at: int, views: Iterable[tuple[PatternKey, CachedView]]) -> None:
        """Cache views read since generation `began_at`, but none of a pattern dropped since."""
        if self._size <= 0:
            return
        with self._lock:
            if began_at < self._floor:
                return
            for key, view in views:
                if self._dropped_at.get(key, -1) > began_at:
                    continue
                self._entries.put(key, view)

    def drop(self, keys: Iterable[PatternKey]) -> None:
        with self._lock:
            self._generation += 1
            for key in keys:
                self._entries.pop(key)
                self._dropped_at[key] = self._generation
            if len(self._dropped_at) > self._size:
                self._dropped_at.clear()
                self._floor = self._generation

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
