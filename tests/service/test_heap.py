"""The open hands the memory its restore freed back to the system (`service._heap`)."""

from __future__ import annotations

import ctypes.util
import os

import pytest

from benches.harness.service_harness import rss_bytes
from pml_server.service._heap import release_free_memory


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no C library to ask")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    # 2 KiB blocks come from malloc's heap (Python's own allocator takes only small ones); the
    # last one stays alive, so the heap's top is in use and freeing the rest cannot shrink it
    blocks = [bytearray(2048) for _ in range(100_000)]
    survivor = blocks[-1]
    del blocks[:-1]
    before = rss_bytes(os.getpid())
    assert release_free_memory()
    released = before - rss_bytes(os.getpid())
    assert released > 100 * 1024 * 1024, f"{released} bytes returned of about 200 MiB freed"
    assert len(survivor) == 2048
