"""The one bounded least-recently-used map every cache of pml is built on.

Bounded by a weight: by default every entry weighs 1 (a bound on the number of entries); a
`weigh` function makes it a bound in bytes (the store's read cache, the engine's views). Adding
past the bound evicts the least recently used entries and hands them back, so a cache that must
act on an eviction (remember the newest invalidation it forgets) can. An entry heavier than the
whole bound is not kept.

Not thread-safe: every cache that uses one already holds its own lock around a lookup and what
it decides from it, so a second lock here would only cost. The standard library's
`functools.lru_cache` stays where a pure function of hashable arguments is memoized.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(_key: object, _value: object) -> int:
    return 1


class Lru(Generic[K, V]):
    """A map of at most `bound` total weight, least recently used first out."""

    __slots__ = ("_bound", "_entries", "_weigh", "_weight")

    def __init__(self, bound: int, weigh: Callable[[K, V], int] | None = None) -> None:
        self._bound = bound
        self._weigh: Callable[[K, V], int] = weigh or _one
        # key -> (value, its weight), least recently used first
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0

    @property
    def bound(self) -> int:
        return self._bound

    @property
    def weight(self) -> int:
        """The total weight held (the number of entries without `weigh`)."""
        return self._weight

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """Keys, least recently used first."""
        return iter(self._entries)

    def get(self, key: K) -> V | None:
        """The value, now the most recently used; None when absent."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def peek(self, key: K) -> V | None:
        """The value, its recency unchanged; None when absent."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Set `key` (now the most recently used) and evict past the bound; the evicted
        entries, oldest first (the new one itself when it alone weighs more than the bound)."""
        self.pop(key)
        weight = self._weigh(key, value)
        if weight > self._bound:
            return [(key, value)]
        self._entries[key] = (value, weight)
        self._weight += weight
        evicted: list[tuple[K, V]] = []
        while self._weight > self._bound:
            old_key, (old_value, old_weight) = self._entries.popitem(last=False)
            self._weight -= old_weight
            evicted.append((old_key, old_value))
        return evicted

    def pop(self, key: K) -> V | None:
        """Remove `key`; its value, or None when absent."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._weight -= entry[1]
        return entry[0]

    def clear(self) -> None:
        self._entries.clear()
        self._weight = 0


# What one entry of an `Lru` holds besides its key and value objects: its slot and node in the
# OrderedDict, the (value, weight) tuple and the weight; tracemalloc measured at most 204 bytes
# (the dict's table is largest right after it grows), and the allocator rounds each object up
# to 16 bytes besides (docs/reliability.md, "Caches bounded in bytes").
ENTRY_BYTES = 320
# What a bytes object holds besides its bytes (`sys.getsizeof(b"")`).
BYTES_HEADER = 33

# What a record decoded from JSON holds, estimated from the JSON text (docs/reliability.md,
# "Caches bounded in bytes"): its text again (a string's characters take at most the bytes of
# their UTF-8), an object per string (a str's header, 49 to 74 bytes, and its slot in a list or
# dict), per list or object (a list, a dict, a dataclass and its __dict__), and the record's.
# Counted from the text, not from the decoded objects: walking them cost 3 to 10 times the
# decoding itself.
_DECODED_PER_STRING = 80
_DECODED_PER_CONTAINER = 96
_DECODED_RECORD = 128


# UTF-8 lead bytes (or JSON escapes) of a character outside the Basic Multilingual Plane, and
# of one past Latin-1: Python keeps every character of a string holding one in 4 and 2 bytes.
_ASTRAL = re.compile(rb"[\xf0-\xf4]|\\u[dD][89abAB]")
_WIDE = re.compile(rb"[\xc4-\xef]|\\u(?!00)")


def _char_width(raw: bytes) -> int:
    """The most bytes a character of `raw`'s strings may take decoded (every character of a
    string takes as many as its widest one), over the 1 or more each takes stored."""
    if raw.isascii() and b"\\u" not in raw:
        return 1
    return 4 if _ASTRAL.search(raw) else 2 if _WIDE.search(raw) else 1


def decoded_bytes(raw: bytes) -> int:
    """An upper estimate of the memory the record `raw` (JSON) decodes to, for every shape a
    client can make: one-character strings decode to ten times their stored bytes."""
    # Quotes but the escaped ones; a backslash before a quote may be the end of an escaped
    # backslash instead (`"C:\\"`), so those are counted back: never fewer strings than there are.
    quotes = raw.count(b'"') - raw.count(b'\\"') + raw.count(b'\\\\"')
    strings = quotes // 2
    containers = raw.count(b"[") + raw.count(b"{")
    return (
        len(raw) * _char_width(raw)
        + _DECODED_PER_STRING * strings
        + _DECODED_PER_CONTAINER * containers
        + _DECODED_RECORD
    )


class BytesMemo(Generic[V]):
    """`decode(raw)` memoized on the stored bytes, least recently used first out, bounded by
    an estimate of the bytes it holds (each key, its decoded record: `decoded_bytes`, and the
    entry), not by a count: the records are the clients' text (an intent of 4,096 characters, a
    pattern's code), and 16,384 of them held 280 MB to 550 MB where short ones hold 70 MB.
    Keyed by the exact bytes, a record can never be stale; the records are shared
    between callers (frozen). Thread-safe: decoders run on every request thread (docs/operations.md,
    "Limits, keepalive and shutdown")."""

    __slots__ = ("_decode", "_entries", "_lock")

    def __init__(self, decode: Callable[[bytes], V], bound_bytes: int) -> None:
        self._decode = decode
        self._entries: Lru[bytes, V] = Lru(bound_bytes, weigh=_memo_weight)
        self._lock = threading.Lock()

    @property
    def bound(self) -> int:
        return self._entries.bound

    @property
    def weight(self) -> int:
        """The estimated bytes held."""
        with self._lock:
            return self._entries.weight

    def __call__(self, raw: bytes) -> V:
        with self._lock:
            found = self._entries.get(raw)
        if found is not None:
            return found
        value = self._decode(raw)
        with self._lock:
            self._entries.put(raw, value)
        return value


def _memo_weight(raw: bytes, _value: object) -> int:
    return ENTRY_BYTES + BYTES_HEADER + len(raw) + decoded_bytes(raw)
