"""Handing the heap's free memory back to the system once the open's work is done.

The open builds every tenant's indexes from the store: intent records streamed and dropped,
and each lexical index renumbered (`_restore`), whose copies of the posting lists and of the
documents' arrays are freed at once. glibc's allocator keeps such freed memory in the process
(its heap top is rarely free, so it cannot shrink), and the server then holds it for its
whole life: 78 bytes a document of a 1M-document lexical index renumbered, on top of its 804
(a scratch build of the service bench's 1M intents, resident size read before and after).
`malloc_trim` returns the free pages of every arena. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_free_memory() -> bool:
    """Give the allocator's free pages back to the system; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
