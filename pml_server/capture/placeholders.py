"""A stored pattern's placeholder names as today's normalizer gives them (docs/normalization.md,
Placeholder names): an older build named a placeholder after a credential found in an object
key, so its stored template, parameters, schema and the counters keyed by those names kept the
secret. `renamed` derives them again from the pattern's stored (redacted) code."""

from __future__ import annotations

import json
from dataclasses import replace

from pml_server.capture.normalize import NormalizedCode, NormalizedParam
from pml_server.domain.records import ParamSpec, PatternCounters, PatternRecord


def renamed(
    record: PatternRecord, counters: PatternCounters | None, normalized: NormalizedCode
) -> tuple[PatternRecord, PatternCounters | None] | None:
    """`record` and `counters` with the template, parameters and schema of `normalized` (the
    stored `original_code` normalized today), or None when they already agree (the template,
    the placeholder names, and no parameter newly flagged secret). The code hash
    is kept (captures find the pattern by it). A parameter stays secret when either build
    flagged it (a value-shaped secret reads "[REDACTED]" in the stored code); recent values and
    failure values follow their parameter to its new name, by position, and values of a name
    that no longer exists are dropped."""
    old = record.params
    new = normalized.params
    same_count = len(old) == len(new)
    if (
        record.template == normalized.template
        and [p.name for p in old] == [p.name for p in new]
        and all(o.secret or not n.secret for o, n in zip(old, new, strict=True))
    ):
        # the names agree: types and formats widened by later runs are kept (capture/schema.py)
        return None
    params = tuple(
        ParamSpec(p.name, p.json_type, p.secret or (same_count and old[i].secret))
        for i, p in enumerate(new)
    )
    schema = _with_secrets(normalized.schema_json, params, new)
    if (record.template, record.params, record.parameter_schema_json) == (
        normalized.template,
        params,
        schema,
    ):
        return None
    pattern = replace(
        record, template=normalized.template, params=params, parameter_schema_json=schema
    )
    if counters is None:
        return pattern, None
    if same_count:
        names = {o.name: n.name for o, n in zip(old, new, strict=True)}
    else:
        names = {n.name: n.name for n in new}
    recent = {names[k]: v for k, v in counters.recent_values.items() if k in names}
    signatures = [
        replace(s, values_json={names[k]: v for k, v in s.values_json.items() if k in names})
        for s in counters.failure_signatures
    ]
    return pattern, replace(counters, recent_values=recent, failure_signatures=signatures)


def _with_secrets(
    schema_json: str, params: tuple[ParamSpec, ...], new: tuple[NormalizedParam, ...]
) -> str:
    """The schema with `writeOnly` on every parameter flagged secret only by the older build."""
    added = [p.name for p, n in zip(params, new, strict=True) if p.secret and not n.secret]
    if not added:
        return schema_json
    schema = json.loads(schema_json)
    for name in added:
        prop = schema.get("properties", {}).get(name)
        if isinstance(prop, dict):
            prop["writeOnly"] = True
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
