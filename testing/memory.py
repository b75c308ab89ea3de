"""What a block of a test leaves held in memory, as tracemalloc sees it: the tests that pin a
cache's bound in bytes (what it keeps of many entries past the bound) or its count of an entry
(at least what the entry keeps) measure with `memory_held`."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager


class Held:
    """The bytes the block's allocations still hold at its end (set when the block ends)."""

    nbytes: int = 0


@contextmanager
def memory_held() -> Iterator[Held]:
    """Garbage collected before the block and at its end, traced only while it runs: what was
    allocated before it is not counted, whatever it holds. The block deletes its own last
    references to what it should not keep (a loop's variable) before it ends."""
    held = Held()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield held
        gc.collect()
        held.nbytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
