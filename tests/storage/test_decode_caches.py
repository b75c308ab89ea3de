"""The caches of decoded records (`BytesMemo`: intents, intents as views show them, patterns,
counters) hold at most their bytes, whatever the records' sizes: an intent is the client's text
(up to 4,096 characters; an OTLP run's is its last user message), and counted by entries, 16,384
long ones held about 550 MB in the two intent caches."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from pml_server.domain import records
from pml_server.domain.limits import LIMITS
from pml_server.domain.lru import BytesMemo
from pml_server.domain.records import IntentRecord
from pml_server.storage import codec

_CJK = "".join(chr(c) for c in range(0x4E00, 0x4E00 + LIMITS.intent.bound))


def _long_intent(n: int) -> bytes:
    """A stored intent of the longest text, in a script UTF-8 takes 3 bytes a character for,
    as a store read hands it out (a bytes object of its exact size: orjson's own output keeps
    a larger allocation, which tracemalloc counts whole)."""
    text = f"{n} {_CJK}"[: LIMITS.intent.bound]
    vector = np.full(384, 0.05, dtype=np.float32)
    return _as_read(IntentRecord(n, "pat_1", text, 1, 0, "all-MiniLM-L6-v2", vector).to_json())


def _as_read(raw: bytes) -> bytes:
    return bytes(bytearray(raw))


def test_the_intent_caches_hold_at_most_their_bytes_of_the_longest_intents() -> None:
    memos = (records.decode_intent, codec.decode_intent_for_view)
    bound = sum(m.bound for m in memos)
    # enough distinct intents to pass both bounds twice over
    count = 2 * bound // (2 * len(_long_intent(0))) + 1
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(count):
            raw = _long_intent(10_000_000 + n)
            assert records.decode_intent(raw).id == 10_000_000 + n
            assert codec.decode_intent_for_view(raw).pattern_id == "pat_1"
        del raw
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= bound, f"{held} bytes held after {count} intents; the bound is {bound}"
    assert all(m.weight <= m.bound for m in memos)


def test_the_estimate_covers_what_a_decoded_record_really_holds() -> None:
    """The weight counted for each entry is at least what tracemalloc sees it keep (so the
    bound in bytes is one), for short and long, ASCII and CJK intents."""
    for text in ("parse the csv report", "x" * LIMITS.intent.bound, _CJK):
        memo = BytesMemo(IntentRecord.from_json, 1 << 40)
        vector = np.ones(384, np.float32)
        raws = [
            _as_read(IntentRecord(n, "pat_1", f"{n}{text}", 3, 0, "m", vector).to_json())
            for n in range(200)
        ]
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for raw in raws:
                memo(raw)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        keys = sum(len(raw) for raw in raws)  # allocated before tracing began, held as keys
        assert held + keys <= memo.weight, (text[:20], held + keys, memo.weight)
        assert memo(raws[0]) is memo(raws[0])  # shared, decoded once
