"""`capture.placeholders.renamed`: what the renaming of an older build's placeholder names
(docs/normalization.md, Placeholder names) rewrites, and what it leaves alone."""

from __future__ import annotations

from pml_server.capture.normalize import NormalizedCode, normalize
from pml_server.capture.placeholders import renamed
from pml_server.domain.records import ParamSpec, PatternCounters, PatternRecord
from testing.engine import stored_record


def _stored(normalized: NormalizedCode) -> PatternRecord:
    """The record a capture of today's build stores for `normalized`."""
    return stored_record(normalized)


def test_a_pattern_of_todays_build_is_left_alone_even_with_a_secret_value() -> None:
    # The secret is flagged by its value, which the stored code holds as "[REDACTED]": the
    # stored code normalized again does not flag it, and the pattern must not lose the flag.
    captured = normalize('x = call("sk_live_abcdefghijklmnop1234", 3)', "python")
    record = _stored(captured)
    again = normalize(record.original_code, "python")
    assert [p.secret for p in again.params] == [False, False]
    assert renamed(record, PatternCounters(), again) is None


def test_an_older_name_is_renamed_with_its_values_and_a_kept_secret_flag() -> None:
    captured = normalize(
        'x = call({"https://admin:hunter2pw@db": "sk_live_abcdefghijk12345"})', "python"
    )
    record = _stored(captured)
    new_name = record.params[0].name
    assert new_name == "$HTTPS_REDACTED_DB"
    assert record.params[0].secret
    old_name = "$HTTPS_ADMIN_HUNTER2PW_DB"
    old = PatternRecord(
        **{
            **vars(record),
            "template": record.template.replace(new_name, old_name),
            "params": (ParamSpec(old_name, "string", True),),
            "parameter_schema_json": record.parameter_schema_json.replace(new_name, old_name),
        }
    )
    counters = PatternCounters(recent_values={old_name: ['"[REDACTED]"'], "$GONE": ["1"]})
    result = renamed(old, counters, normalize(record.original_code, "python"))
    assert result is not None
    pattern, moved = result
    assert (pattern.template, pattern.params) == (record.template, record.params)
    assert pattern.parameter_schema_json == record.parameter_schema_json  # writeOnly kept
    assert moved is not None
    assert moved.recent_values == {new_name: ['"[REDACTED]"']}
