"""`capture.schema`: a pattern's parameters and schema joined over its successful runs
(docs/normalization.md, Schema). Runs are real normalizer output of one code shape whose
literal varies, so every run shares the code hash as captures of one pattern do."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.capture.normalize import NormalizedCode, normalize
from pml_server.capture.rules import REDACTED
from pml_server.capture.schema import redact_turned_secret, widened
from pml_server.domain.records import (
    FailureSignature,
    ParamSpec,
    PatternCounters,
    PatternRecord,
)
from testing.engine import stored_record

NUMBERS = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda f: f"{f:.3f}"),
)
STRINGS = st.sampled_from(
    [
        "a.json",
        "./out/report.csv",
        "/etc/hosts",
        "hello",
        "https://example.com/x",
        "ops@example.com",
        "2026-12-05",
        "2026-12-05T10:00:00Z",
        "plain words",
        "sk-abcdefghijklmnopqrstuvwx",
    ]
).map(json.dumps)


def _run(literal: str) -> NormalizedCode:
    return normalize(f"await mcp.fetch({{x: {literal}, n: 1}})", "javascript")


def _stored(first: NormalizedCode) -> PatternRecord:
    """The record the first run's capture stores."""
    return stored_record(first, ("fetch",))


def _fold(runs: list[NormalizedCode]) -> PatternRecord:
    record = _stored(runs[0])
    for run in runs[1:]:
        assert run.code_hash == record.code_hash
        record = widened(record, run) or record
    return record


def _prop(record: PatternRecord, name: str = "$X") -> dict[str, object]:
    prop: dict[str, object] = json.loads(record.parameter_schema_json)["properties"][name]
    return prop


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(st.lists(NUMBERS, min_size=1, max_size=6), st.lists(STRINGS, min_size=1, max_size=6)),
    st.randoms(),
)
def test_the_schema_admits_every_run_whatever_their_order(literals: list[str], rnd: object) -> None:
    runs = [_run(v) for v in literals]
    record = _fold(runs)
    single = [_prop(_stored(r)) for r in runs]
    # the type admits every value: an integer is a number
    types = {p["type"] for p in single}
    want = "number" if types == {"integer", "number"} else types.pop()
    assert _prop(record)["type"] == want
    assert record.params[0].json_type == want
    # a format only when every run showed the same one
    formats = {p.get("format") for p in single}
    assert _prop(record).get("format") == (formats.pop() if len(formats) == 1 else None)
    # secret when any run's value was one, in the parameters and the schema alike
    secret = any(r.params[0].secret for r in runs)
    assert record.params[0].secret is secret
    assert (_prop(record).get("writeOnly") is True) is secret
    # the untouched parameter keeps its schema
    assert _prop(record, "$N") == _prop(_stored(runs[0]), "$N")
    # order does not matter, and joining a run already seen changes nothing
    shuffled = list(runs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    other = _fold(shuffled)
    assert (other.params, other.parameter_schema_json) == (
        record.params,
        record.parameter_schema_json,
    )
    assert all(widened(record, r) is None for r in runs)


def test_an_integer_then_a_fraction_is_a_number() -> None:
    first, second = _run("5"), _run("2.5")
    assert _prop(_stored(first))["type"] == "integer"
    record = widened(_stored(first), second)
    assert record is not None
    assert _prop(record)["type"] == "number"
    assert record.params[0] == ParamSpec("$X", "number", False)
    assert widened(record, _run("7")) is None


def test_a_format_goes_when_a_value_does_not_show_it() -> None:
    record = widened(_stored(_run('"a.json"')), _run('"notes"'))
    assert record is not None
    assert "format" not in _prop(record)
    assert widened(_stored(_run('"a.json"')), _run('"b/c.txt"')) is None  # both paths


def test_earlier_values_of_a_parameter_turned_secret_are_redacted() -> None:
    before = _stored(_run('"abc"'))
    after = widened(before, _run('"sk-abcdefghijklmnopqrstuvwx"'))
    assert after is not None
    assert after.params[0].secret
    counters = PatternCounters(
        recent_values={"$X": [REDACTED, '"abc"'], "$N": ["1"]},
        failure_signatures=[FailureSignature("s", "fetch", "e", 1, 1, {"$X": '"abc"', "$N": "1"})],
    )
    out = redact_turned_secret(before, after, counters)
    assert out.recent_values == {"$X": [REDACTED, REDACTED], "$N": ["1"]}
    assert out.failure_signatures[0].values_json == {"$X": REDACTED, "$N": "1"}
    # nothing turned secret: the counters are returned as they are
    assert redact_turned_secret(after, after, counters) is counters
