"""Decoding of the records Suggest reads for every candidate, memoized on the stored bytes;
encoding of the records every new pattern writes, without `dataclasses.asdict`.

Keyed by the exact bytes, a cached record can never be stale (changed bytes are another key).
Lookups are cheap when the store's read cache hands back the same bytes object: CPython keeps
a bytes object's hash, and a dict compares identity first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from pml_server.capture.steps import pattern_steps
from pml_server.domain import json_form, yielding
from pml_server.domain.limits import MIB
from pml_server.domain.lru import BytesMemo
from pml_server.domain.model import IntentView, ParamView, PatternView
from pml_server.domain.records import (
    CapabilityRecord,
    IntentRecord,
    PatternCounters,
    PatternRecord,
)

# What each cache of decoded records holds at most, estimated (`BytesMemo`; docs/operations.md,
# "Limits, keepalive and shutdown").
DECODE_CACHE_BYTES = 64 * MIB
# Records above this size (templates go up to 256 KiB) are decoded every time: they are rare,
# and caching them would only push the common ones out.
DECODE_CACHE_MAX_BYTES = 8_192

_pattern = BytesMemo(PatternRecord.from_json, DECODE_CACHE_BYTES)
_counters = BytesMemo(PatternCounters.from_json, DECODE_CACHE_BYTES)


def decode_pattern(raw: bytes) -> PatternRecord:
    """`PatternRecord.from_json(raw)`, shared between callers (the record is frozen)."""
    if len(raw) > DECODE_CACHE_MAX_BYTES:
        return PatternRecord.from_json(raw)
    return _pattern(raw)


def decode_counters_shared(raw: bytes) -> PatternCounters:
    """`PatternCounters.from_json(raw)` for readers only: the record returned is shared between
    calls, so it must never be mutated (writers decode their own copy with `from_json`)."""
    if len(raw) > DECODE_CACHE_MAX_BYTES:
        return PatternCounters.from_json(raw)
    return _counters(raw)


_NO_VECTOR = np.zeros(0, dtype=np.float32)
_NO_VECTOR.flags.writeable = False


def intent_without_vector(raw: bytes) -> IntentRecord:
    """An intent record without its vector (an empty array), for less than half the cost of
    `IntentRecord.from_json`, which decodes the base64 vector too."""
    data = json_form.loads(raw)
    data.pop("vector", None)
    return IntentRecord(vector=_NO_VECTOR, **data)


# `intent_without_vector`, memoized: what a view shows. Shared between callers like the other
# decoded records (frozen).
decode_intent_for_view = BytesMemo(intent_without_vector, DECODE_CACHE_BYTES)


def _intent_order(intent: dict[str, Any]) -> tuple[int, int]:
    return -intent["hit_count"], intent["id"]


def stored_view(
    pattern: bytes, counters: bytes, intents: Sequence[bytes], intent_count: int
) -> PatternView:
    """The view `capture.views.pattern_view` builds of the decoded record, counters and the
    shown intents of `intent_count` (tests hold the two equal), straight from their stored
    JSON: a Suggest shows views of
    patterns it has not shown lately, and the three records, their parameter specs and the
    intent records it would build first were half of such a view's cost."""
    p = json_form.loads(pattern)
    c = json_form.loads(counters)
    recent: dict[str, list[str]] = c.get("recent_values", {})
    params = []
    for spec in p["params"]:
        yielding.checkpoint()  # up to 256 parameters a pattern: a long call's loop
        name = spec["name"]
        values = tuple(recent.get(name, ()))
        params.append(ParamView(name, spec["json_type"], spec["secret"], values))
    shown = [json_form.loads(raw) for raw in intents]
    shown.sort(key=_intent_order)
    runs = c.get("duration_runs", 0)
    return PatternView(
        id=p["id"],
        code_hash=p["code_hash"],
        template=p["template"],
        original_code=p["original_code"],
        language=p["language"],
        tools_used=tuple(p["tools_used"]),
        params=tuple(params),
        parameter_schema_json=p["parameter_schema_json"],
        usage_count=c.get("usage", 0),
        success_count=c.get("success", 0),
        failure_count=c.get("failure", 0),
        first_seen_ms=p["first_seen_ms"],
        last_used_ms=c.get("last_used_ms", 0),
        mean_duration_ms=c.get("duration_sum_ms", 0.0) / runs if runs else 0.0,
        capability_id=p["capability_id"],
        intents=tuple(
            IntentView(f"int_{i['id']:016x}", i["text"], i["hit_count"], i["last_seen_ms"])
            for i in shown
        ),
        flagged_for_removal=p.get("flagged_for_removal", False),
        superseded_by=p.get("superseded_by", ""),
        tool_mismatch_count=c.get("mismatch_count", 0),
        steps=pattern_steps(
            p["id"],
            p["code_hash"],
            p["original_code"],
            p["language"],
            p.get("steps_json", ""),
        ),
        intent_count=intent_count,
    )


_PATTERN_FIELDS = tuple(f.name for f in dataclasses.fields(PatternRecord))


def encode_pattern(record: PatternRecord) -> bytes:
    """The bytes of `record.to_json()`, built from a plain dict: `asdict` deep-copies every
    field and was a tenth of a capture's Python time (tests/storage/test_repo.py holds the two
    encodings equal)."""
    data = {name: getattr(record, name) for name in _PATTERN_FIELDS}
    data["params"] = [
        {"name": p.name, "json_type": p.json_type, "secret": p.secret} for p in record.params
    ]
    return json_form.dumps(data)


def encode_capability(record: CapabilityRecord) -> bytes:
    """The bytes of `record.to_json()` without `asdict` (every field is flat)."""
    return json_form.dumps(vars(record))
