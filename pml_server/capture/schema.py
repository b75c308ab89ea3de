"""A pattern's parameters and schema as every successful run showed them (docs/normalization.md,
Schema): runs of one pattern share its code hash, but `5` and `2.5` hash alike, and so do
`"a.json"` and `"hello"`, so the schema of the first run alone can refuse values that later
runs used successfully. `widened` joins what a new run's code says with what is stored: a
parameter seen as an integer and as a number is a number; a `format` stays only while every
run's value showed it; a parameter any run's value flagged secret stays secret (`writeOnly`).
The join is commutative, associative and idempotent, so the stored schema does not depend on
the order the runs came in."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pml_server.capture.normalize import NormalizedCode
from pml_server.capture.rules import REDACTED
from pml_server.domain.records import ParamSpec, PatternCounters, PatternRecord


def widened(record: PatternRecord, seen: NormalizedCode) -> PatternRecord | None:
    """`record` with its parameters (types, secret flags) and schema joined with those of
    `seen` (a successful run of the same code hash), or None when nothing changes. A run whose
    placeholder names differ (not expected for one code hash) changes nothing."""
    if len(record.params) != len(seen.params):
        return None
    pairs = tuple(zip(record.params, seen.params, strict=True))
    if any(p.name != s.name for p, s in pairs):
        return None
    if seen.schema_json == record.parameter_schema_json and all(
        p.json_type == s.json_type and (p.secret or not s.secret) for p, s in pairs
    ):
        return None  # the run agrees with what is stored: most captures
    params = tuple(
        ParamSpec(p.name, join_type(p.json_type, s.json_type), p.secret or s.secret)
        for p, s in pairs
    )
    schema = record.parameter_schema_json
    if seen.schema_json != schema:
        schema = join_schemas(schema, seen.schema_json)
    if params == record.params and schema == record.parameter_schema_json:
        return None
    return replace(record, params=params, parameter_schema_json=schema)


def join_type(a: str, b: str) -> str:
    """The JSON type admitting values of both: an integer is a number. Other pairs cannot
    share a code hash (strings, numbers and code hash apart); the stored type is kept."""
    if a == b:
        return a
    if {a, b} == {"integer", "number"}:
        return "number"
    return a


def join_schemas(stored: str, seen: str) -> str:
    """The stored schema with each property's `type` joined, a `format` kept only where both
    schemas give the same one and `writeOnly` where either does; the rest as stored."""
    out: dict[str, Any] = json.loads(stored)
    other: dict[str, Any] = json.loads(seen)
    theirs = other.get("properties", {})
    for name, prop in out.get("properties", {}).items():
        new = theirs.get(name)
        if not isinstance(prop, dict) or not isinstance(new, dict):
            continue
        if isinstance(prop.get("type"), str) and isinstance(new.get("type"), str):
            prop["type"] = join_type(prop["type"], new["type"])
        if "format" in prop and prop["format"] != new.get("format"):
            del prop["format"]
        if new.get("writeOnly") is True:
            prop["writeOnly"] = True
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def redact_turned_secret(
    before: PatternRecord, after: PatternRecord, counters: PatternCounters
) -> PatternCounters:
    """`counters` with the stored values of every parameter `after` flags secret and `before`
    did not replaced by `"[REDACTED]"` (recent values and failure signatures' values): a
    parameter a run showed to carry a credential keeps none of its earlier values."""
    turned = {
        a.name
        for b, a in zip(before.params, after.params, strict=True)
        if a.secret and not b.secret
    }
    return without_values_of(counters, turned)


def without_values_of(counters: PatternCounters, names: set[str]) -> PatternCounters:
    """`counters` with every stored value of the parameters `names` (recent values and failure
    signatures' values) replaced by `"[REDACTED]"`."""
    if not names:
        return counters
    recent = {
        name: [REDACTED] * len(values) if name in names else values
        for name, values in counters.recent_values.items()
    }
    signatures = [
        replace(
            s,
            values_json={k: REDACTED if k in names else v for k, v in s.values_json.items()},
        )
        for s in counters.failure_signatures
    ]
    return replace(counters, recent_values=recent, failure_signatures=signatures)
