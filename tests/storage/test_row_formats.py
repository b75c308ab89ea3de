"""The rows a store holds, pinned to its schema version: an older build reads a row through
its own dataclasses, which take no field they do not know, so a build that writes rows of
another shape raises the schema version and the older build refuses the store at open instead
of failing on its reads (docs/storage.md, Migrations). Real engine, real RocksDB in tmp_path."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pml_server.storage import SCHEMA_VERSION, Store
from pml_server.storage.keys import COLUMN_FAMILIES
from pml_server.storage.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from tests.support import make_record, open_engine

# Each family's JSON values as this schema writes them: their keys, nested objects and lists
# of objects (a scalar is None, a list [its items' shape]; an object keyed by parameter names
# {"$PARAM": its values' shape}); a family holding no JSON object is "bytes".
# A change here is a change of row formats: raise both schema versions with it.
ROWS_AT = (2, 6)  # PostgreSQL 6: the unlogged pml_feed_epoch, no row changed
ROWS = {
    "patterns": {
        "capability_id": None,
        "code_hash": None,
        "code_tools": [None],
        "first_seen_ms": None,
        "flagged_for_removal": None,
        "id": None,
        "language": None,
        "original_code": None,
        "parameter_schema_json": None,
        "params": [{"json_type": None, "name": None, "secret": None}],
        "parse_ok": None,
        "steps_json": None,
        "superseded_by": None,
        "template": None,
        "tools_used": [None],
    },
    "hashes": "bytes",
    "intents": {
        "hit_count": None,
        "id": None,
        "last_seen_ms": None,
        "model_id": None,
        "pattern_id": None,
        "text": None,
        "vector": None,
    },
    "capabilities": {"created_ms": None, "id": None, "pattern_ids": [None], "tools": [None]},
    "cap_by_tools": "bytes",
    "counters": {
        "duration_runs": None,
        "duration_sum_ms": None,
        "failure": None,
        "failure_signatures": [
            {
                "count": None,
                "error": None,
                "last_ms": None,
                "signature": None,
                "tool": None,
                "values_json": {"$PARAM": None},
            }
        ],
        "intent_count": None,
        "last_used_ms": None,
        "mismatch_count": None,
        "recent_values": {"$PARAM": [None]},
        "success": None,
        "tags": [None],
        "top_intents": [[None]],
        "usage": None,
    },
    "failures": {
        "code_hash": None,
        "erased": None,
        "error": None,
        "intent": None,
        "pattern_id": None,
        "request_id": None,
        "time_ms": None,
        "tool": None,
    },
    "requests": {
        "capability_id": None,
        "digest": None,
        "new_pattern": None,
        "outcome": None,
        "pattern_id": None,
        "time_ms": None,
        "tool_failures": [[None]],
        "tool_mismatch": None,
    },
    "oplog": {"ids": [None], "op": None, "tenant": None},
    "audit": {"action": None, "pattern_id": None, "reason": None, "time_ms": None},
    "meta": {
        "capabilities": None,
        "executions": None,
        "failures_logged": None,
        "intents": None,
        "patterns": None,
        "rejected": None,
    },
    "sessions": {"capability": None, "ms": None},
    "transitions": {"count": None, "ms": None},
}


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        if value and all(key.startswith("$") for key in value):  # keyed by parameter names
            return {"$PARAM": _merged([_shape(item) for item in value.values()])}
        return {key: _shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [_merged([_shape(item) for item in value])]
    return None


def _merged(shapes: list[Any]) -> Any:
    """One shape for several values, whatever their order: their objects' keys together, each
    key's shapes merged; an object or a list wins over a scalar or an empty list."""
    objects = [shape for shape in shapes if isinstance(shape, dict)]
    if objects:
        keys = sorted({key for shape in objects for key in shape})
        return {key: _merged([shape[key] for shape in objects if key in shape]) for key in keys}
    lists = [shape for shape in shapes if isinstance(shape, list)]
    if lists:
        return [_merged([item for shape in lists for item in shape])]
    return None


def _family_shapes(store: Store) -> dict[str, Any]:
    """Each family's JSON objects' shape; "bytes" for a family holding none (its values are
    ids, binary or empty)."""
    found: dict[str, Any] = {}
    for cf in COLUMN_FAMILIES:
        shapes = []
        for _, raw in store.scan(cf, b""):
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, dict):
                shapes.append(_shape(value))
        found[cf] = _merged(shapes) if shapes else "bytes"
    return found


def test_the_rows_written_are_those_of_the_schema_version(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e")
    first = replace(make_record("r1", "Read the JSON file", ["fs.read"]), session_id="s")
    kept = engine.record("t", first)
    engine.record("t", make_record("r2", "Read the JSON file", ["fs.read"], failed={"fs.read"}))
    engine.record("t", replace(make_record("r3", "Mail the boss", ["mail.send"]), session_id="s"))
    gone = engine.record("t", make_record("r4", "Zip the logs", ["zip.make"]))
    engine.record("t", make_record("r5", "Zip the logs", ["zip.make"], failed={"zip.make"}))
    engine.record("t", make_record("r6", "Ping the host", ["net.ping"], failed={"net.ping"}))
    engine.delete_pattern("t", gone.pattern_id)
    assert kept.pattern_id
    shapes = _family_shapes(engine._state.store)
    engine.close()
    assert (SCHEMA_VERSION, PG_SCHEMA_VERSION) == ROWS_AT, "record the rows of the new versions"
    assert shapes == ROWS, (
        "the rows changed shape: an older build cannot read them. Raise SCHEMA_VERSION in "
        "storage/rocks.py and storage/postgres/_schema.py, then record the rows and versions here"
    )
