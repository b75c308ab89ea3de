"""The caches of decoded records (`BytesMemo`: intents, intents as views show them, patterns,
counters) hold at most their bytes, whatever the records' sizes: an intent is the client's text
(up to 4,096 characters; an OTLP run's is its last user message), and counted by entries, 16,384
long ones held about 550 MB in the two intent caches."""

from __future__ import annotations

import numpy as np
import pytest

from pml_server.domain import json_form, records
from pml_server.domain.limits import LIMITS
from pml_server.domain.lru import BytesMemo, decoded_bytes
from pml_server.domain.records import (
    FailureSignature,
    IntentRecord,
    ParamSpec,
    PatternCounters,
    PatternRecord,
)
from pml_server.storage import codec
from testing.memory import memory_held

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
    with memory_held() as held:
        for n in range(count):
            raw = _long_intent(10_000_000 + n)
            assert records.decode_intent(raw).id == 10_000_000 + n
            assert codec.decode_intent_for_view(raw).pattern_id == "pat_1"
        del raw
    assert held.nbytes <= bound, (
        f"{held.nbytes} bytes held after {count} intents; the bound is {bound}"
    )
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
        with memory_held() as held:
            for raw in raws:
                memo(raw)
        keys = sum(len(raw) for raw in raws)  # allocated before tracing began, held as keys
        assert held.nbytes + keys <= memo.weight, (text[:20], held.nbytes + keys, memo.weight)
        assert memo(raws[0]) is memo(raws[0])  # shared, decoded once


def _counters_of_tiny_values(script_start: int) -> bytes:
    """The counters record of most objects a stored byte: every parameter's recent values one
    character each (a JSON text of one digit, or of one CJK character), as many as fit under
    the size the cache takes (`codec.DECODE_CACHE_MAX_BYTES`)."""
    values = [json_form.dumps(chr(script_start + j)).decode() for j in range(5)]
    recent = {f"$P{i}": values for i in range(256)}
    while True:
        raw = PatternCounters(1, 1, 0, 1, 1.0, 1, 0, recent, [], []).to_json()
        if len(raw) <= codec.DECODE_CACHE_MAX_BYTES:
            return raw
        recent.popitem()


def _signatures() -> bytes:
    signatures = [
        FailureSignature(f"sig{i}", "t", "e", 1000 + i, 2000, {f"$P{j}": "1" for j in range(8)})
        for i in range(16)
    ]
    return PatternCounters(
        1, 1, 0, 1, 1.0, 1, 0, {}, signatures, [str(i) for i in range(32)]
    ).to_json()


def _pattern(params: int, text: str, tool_end: str = "") -> bytes:
    tools = tuple(f"{i}{tool_end}" for i in range(params))
    return PatternRecord(
        "pat_1",
        "sha256:" + "0" * 64,
        text.replace('"', "$P0"),
        text,
        "javascript",
        tools,
        tuple(ParamSpec(f"$P{i}", "string", False) for i in range(params)),
        '{"type":"object"}',
        "cap_1",
        1,
        tools,
    ).to_json()


_CODE = 'const r = await mcp.read_file({path: "a.json"});\nif (!r.ok) console.log("failed", r);'
# Stored records of every kind and shape: as captures write them (a short pattern, its counters
# after some runs), and the most crowded ones a client can make (most small strings a byte).
_SHAPES = {
    "pattern": (PatternRecord.from_json, _pattern(2, _CODE)),
    "pattern of 256 parameters": (PatternRecord.from_json, _pattern(256, "")),
    # one character outside the Basic Multilingual Plane makes Python keep every character of
    # its string in 4 bytes: the code's 8 KiB stored hold about 32 KiB decoded, twice
    "pattern of ASCII code and one emoji": (
        PatternRecord.from_json,
        _pattern(2, "x" * 4000 + "\U0001f600"),
    ),
    # each string's closing quote follows an escaped backslash, not an escaped quote
    "pattern of tools ending in a backslash": (PatternRecord.from_json, _pattern(256, "", "\\")),
    "counters": (
        PatternCounters.from_json,
        PatternCounters(
            3, 2, 1, 5, 30.0, 3, 0, {"$P0": ['"a.json"', '"b.json"']}, [], ["io"]
        ).to_json(),
    ),
    "counters of one-digit values": (PatternCounters.from_json, _counters_of_tiny_values(0x30)),
    "counters of one-CJK values": (PatternCounters.from_json, _counters_of_tiny_values(0x4E00)),
    "counters of failure signatures": (PatternCounters.from_json, _signatures()),
    "empty counters": (PatternCounters.from_json, PatternCounters().to_json()),
}


def _distinct(raw: bytes, n: int) -> bytes:
    """`raw` with its first number or id made distinct, as a store read hands it out."""
    data = json_form.loads(raw)
    key = "id" if "id" in data else "usage"
    data[key] = f"{data[key]}_{n}" if isinstance(data[key], str) else data[key] + n
    return _as_read(json_form.dumps(data))


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_each_kind_of_record_weighs_at_least_what_it_holds(shape: str) -> None:
    """What `BytesMemo` counts for its entries (the stored bytes it is keyed by, the decoded
    record, its own bookkeeping) is at least what tracemalloc sees it keep for them."""
    decode, raw = _SHAPES[shape]
    memo = BytesMemo(decode, 1 << 40)
    with memory_held() as held:
        for n in range(300):
            memo(_distinct(raw, n))
    assert held.nbytes <= memo.weight, (shape, held.nbytes, memo.weight)


def test_the_counters_cache_holds_at_most_its_bytes_of_the_most_crowded_counters() -> None:
    """Counters of one-character recent values decode to ten times their stored bytes: the
    cache counts their objects, not only their bytes, and stays within its bound."""
    raw = _counters_of_tiny_values(0x4E00)
    bound = codec.DECODE_CACHE_BYTES
    count = 2 * bound // (2 * len(raw)) + 1  # past the bound twice over, whatever it counts
    with memory_held() as held:
        for n in range(count):
            assert codec.decode_counters_shared(_distinct(raw, n)).usage == 1 + n
    assert held.nbytes <= bound, (
        f"{held.nbytes} bytes held after {count} counters; the bound is {bound}"
    )


def test_strings_are_counted_by_their_quotes_escaped_or_not() -> None:
    """A string's closing quote after an escaped backslash ("a\\") ends a string like any other;
    an escaped quote inside one ("a\"c") starts none: the same count as plain strings of the
    same length."""
    plain = json_form.dumps({"tags": ["abc"] * 100, "ids": ["abcd"] * 100})
    escaped = json_form.dumps({"tags": ["a\\"] * 100, "ids": ['a"c'] * 100})
    assert len(plain) == len(escaped)
    assert decoded_bytes(escaped) == decoded_bytes(plain)
