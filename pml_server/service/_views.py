"""The suggested patterns' full views, kept in memory between Suggest calls.

A Suggest ranked in the core still reads each of its k patterns' record, counters and intents
from the store and builds its view: on a cold pattern about 0.1 ms of Python each (three
multi-gets, JSON decoding, the view's objects), as much as the whole ranking. This keeps the
finished `PatternView`s of the patterns answers showed, least recently used first out,
bounded in bytes.

Exactness: every change of a pattern's record, counters or intents is written by
`_writes.commit`, which calls `invalidate` once the batch is in the store (readable at once).
A reader takes a `token` before it reads the store and may `fill` only if nothing invalidated
that pattern since: a view read before a write can never be cached after it. A view shows
the intents its pattern's counters name (domain/shown_intents.py), and every capture that
adds or bumps an intent rewrites the counters in the same batch.

Only for a store this process alone writes: over a shared store other replicas write rows
this cache would not hear of (the engine then has none).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from pml_server.domain.lru import Lru
from pml_server.domain.model import PatternView

# What the cache may hold, in (estimated) bytes of view text and objects.
VIEW_CACHE_BYTES = 32 * 1024 * 1024
# A view above this size (templates go up to 256 KiB) is rebuilt every time.
VIEW_MAX_BYTES = 64 * 1024
# Patterns invalidated lately, remembered to refuse a fill read before their write. A fill
# whose token is older than the oldest remembered invalidation is refused (it cannot tell).
_RECENT_WRITES = 4096
# The objects of a view besides its text: the view, its tuples, each intent's and param's.
_VIEW_OVERHEAD = 800
_PART_OVERHEAD = 200

Key = tuple[str, str]  # (tenant, pattern id)


def view_bytes(view: PatternView) -> int:
    """An estimate of what `view` keeps alive (its strings dominate)."""
    size = _VIEW_OVERHEAD + len(view.template) + len(view.original_code)
    size += len(view.parameter_schema_json) + sum(len(t) for t in view.tools_used)
    size += sum(_PART_OVERHEAD + len(i.text) for i in view.intents)
    for param in view.params:
        size += _PART_OVERHEAD + sum(len(v) for v in param.recent_values_json)
    return size


class ViewCache:
    """The engine's views (see the module docstring); a replica over a shared store has
    `storage.postgres._views.ReplicaViewCache` instead."""

    def __init__(self, budget: int = VIEW_CACHE_BYTES, max_view: int = VIEW_MAX_BYTES) -> None:
        self._max_view = max_view
        self._lock = threading.Lock()
        # key -> (the view, its estimated bytes)
        self._views: Lru[Key, tuple[PatternView, int]] = Lru(
            budget, weigh=lambda _key, entry: entry[1]
        )
        self._writes = 0  # invalidations so far: what a token counts
        # key -> its latest invalidation, the oldest forgotten first
        self._written: Lru[Key, int] = Lru(_RECENT_WRITES)
        self._forgotten = 0  # the latest invalidation dropped from `_written`
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._views)

    @property
    def used_bytes(self) -> int:
        return self._views.weight

    def token(self) -> int:
        """Taken before reading the store for a `fill`."""
        with self._lock:
            return self._writes

    def get(self, tenant: str, pattern_id: str) -> PatternView | None:
        """The cached view of the pattern, if any."""
        with self._lock:
            entry = self._views.get((tenant, pattern_id))  # now the most recently used
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            return entry[0]

    def fill(
        self,
        tenant: str,
        pattern_id: str,
        view: PatternView,
        token: int,
    ) -> bool:
        """Keep `view`, read from the store after `token` was taken, unless the pattern was
        invalidated since (then the view may predate the write). Whether it was kept."""
        size = view_bytes(view)
        if size > self._max_view:
            return False
        key = (tenant, pattern_id)
        with self._lock:
            if token < self._forgotten or (self._written.peek(key) or 0) > token:
                return False
            self._views.put(key, (view, size))
            return True

    def invalidate(self, written: Iterable[Key]) -> None:
        """These patterns' rows changed in the store (called once the write is readable)."""
        with self._lock:
            self._writes += 1
            for key in written:
                self._views.pop(key)
                for _, at in self._written.put(key, self._writes):
                    self._forgotten = max(self._forgotten, at)
