"""`parse_execution_record` (the fast parse of `pml import` lines) against `json_format.Parse`:
the same message for every record `MessageToJson` writes and for hand-varied spellings of it,
the same exception and message for every malformed line, and the fast path really taken for
the usual lines."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from google.protobuf import json_format, timestamp_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from benches.harness import devset_workload
from pml_server._proto.pml.v1 import resources_pb2
from pml_server.cli._record_json import parse_execution_record


def _outcome(parse: Any, text: str) -> tuple[str, str] | bytes:
    """The serialized message (NaN and -0.0 compared bit for bit), or the error's type and text."""
    try:
        message = parse(text)
    except Exception as err:
        return type(err).__name__, str(err)
    return bytes(message.SerializeToString(deterministic=True))


def _reference(text: str) -> resources_pb2.ExecutionRecord:
    return json_format.Parse(text, resources_pb2.ExecutionRecord())


def _assert_same(text: str) -> None:
    assert _outcome(parse_execution_record, text) == _outcome(_reference, text), text


def _fast_only(text: str) -> resources_pb2.ExecutionRecord:
    """The fast path's parse, json_format.Parse made to fail: proves no fallback was taken."""
    expected = _reference(text)
    with mock.patch.object(json_format, "Parse", side_effect=AssertionError("fell back")):
        got = parse_execution_record(text)
    assert got.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    return got


_text = st.text(max_size=30)
_timestamps = st.builds(
    timestamp_pb2.Timestamp,
    seconds=st.integers(-62_135_596_800, 253_402_300_799),  # years 1 to 9999, as RFC 3339
    nanos=st.sampled_from([0, 1, 1_000, 1_000_000, 999_999_999]) | st.integers(0, 999_999_999),
)
_doubles = st.floats() | st.integers(-(2**60), 2**60).map(float) | st.sampled_from([1e-7, -0.0])
_float32s = st.floats(width=32) | st.sampled_from([1e-7, 1e-45, 3.4028234663852886e38, -0.0])


@st.composite
def _tool_calls(draw: st.DrawFn) -> resources_pb2.ToolCall:
    call = resources_pb2.ToolCall(
        tool=draw(_text),
        arguments_json=draw(_text),
        ok=draw(st.booleans()),
        error=draw(_text),
        duration_ms=draw(_doubles),
    )
    if draw(st.booleans()):
        call.start_time.CopyFrom(draw(_timestamps))
    return call


@st.composite
def _records(draw: st.DrawFn) -> resources_pb2.ExecutionRecord:
    record = resources_pb2.ExecutionRecord(
        request_id=draw(_text),
        intent=draw(_text),
        code=draw(_text),
        language=draw(_text),
        tool_calls=draw(st.lists(_tool_calls(), max_size=3)),
        # 7: a number the (open) enum does not name, which MessageToJson writes as a number.
        status=resources_pb2.ExecutionStatus.ValueType(draw(st.sampled_from([0, 1, 2, 7]))),
        duration_ms=draw(_doubles),
        trace=draw(st.binary(max_size=20)),
        intent_embedding=draw(st.lists(_float32s, max_size=5)),
        tags=draw(st.lists(_text, max_size=3)),
    )
    if draw(st.booleans()):
        record.start_time.CopyFrom(draw(_timestamps))
    return record


def _usual(record: resources_pb2.ExecutionRecord) -> bool:
    """No value the fast path leaves to json_format: NaN and the infinities (written as
    strings), an enum number without a name, and the largest float32s (written as 3.4028235e+38,
    past the float32 bound as a double: json_format refuses its own output)."""
    doubles = [record.duration_ms, *(c.duration_ms for c in record.tool_calls)]
    return (
        record.status in (0, 1, 2)
        and all(math.isfinite(x) for x in doubles)
        and all(abs(x) < 3.4e38 for x in record.intent_embedding)
    )


@settings(deadline=None, max_examples=300)
@given(_records(), st.booleans(), st.sampled_from([None, 2]))
def test_same_as_json_format_for_what_message_to_json_writes(
    record: resources_pb2.ExecutionRecord, proto_names: bool, indent: int | None
) -> None:
    text = json_format.MessageToJson(record, preserving_proto_field_name=proto_names, indent=indent)
    _assert_same(text)
    if _usual(record):
        assert _fast_only(text) == record


def _respell(value: Any, data: st.DataObject) -> Any:
    """The same JSON value as json_format reads it, spelled another accepted way: each key in
    either name, integral floats as ints, enum names as numbers."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
            out[data.draw(st.sampled_from([key, snake]))] = _respell(item, data)
        return out
    if isinstance(value, list):
        return [_respell(item, data) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return data.draw(st.sampled_from([value, int(value)]))
    if isinstance(value, str) and value.startswith("EXECUTION_STATUS_"):
        number = resources_pb2.ExecutionStatus.Value(value)
        return data.draw(st.sampled_from([value, number]))
    return value


@settings(deadline=None, max_examples=300)
@given(_records(), st.data())
def test_same_as_json_format_for_other_spellings(
    record: resources_pb2.ExecutionRecord, data: st.DataObject
) -> None:
    as_dict = json_format.MessageToDict(record)
    text = json.dumps(_respell(as_dict, data), ensure_ascii=data.draw(st.booleans()))
    _assert_same(text)
    if _usual(record):
        _fast_only(text)


_MALFORMED = [
    # Not JSON, or not an object.
    "{not json",
    "",
    "[]",
    "5",
    "null",
    '"x"',
    "{} x",
    "\ufeff{}",
    '{"intent": "a",}',
    # Unknown, repeated and null fields.
    '{"bogus": 1}',
    '{"intent": 5, "bogus": 1}',
    '{"[pml.v1.ext]": 1}',
    '{"intent": "a", "intent": "b"}',
    '{"intent": "a", "intent": "a"}',
    '{"requestId": "a", "request_id": "b"}',
    '{"tags": ["a"], "tags": ["b"]}',
    '{"intent": null}',
    '{"toolCalls": null}',
    '{"startTime": null}',
    # Strings.
    '{"intent": 5}',
    '{"intent": ["a"]}',
    '{"intent": true}',
    '{"intent": "\\ud800"}',
    '{"intent": "\\udc00\\ud800"}',
    '{"intent": "\\ud83d\\ude00 \\u00e9"}',
    '{"tags": "a"}',
    '{"tags": [1]}',
    '{"tags": [null]}',
    '{"tags": ["ok", "\\udfff"]}',
    # Enums.
    '{"status": "NOPE"}',
    '{"status": "execution_status_success"}',
    '{"status": 7}',
    '{"status": -1}',
    '{"status": 2147483648}',
    '{"status": true}',
    '{"status": 1.0}',
    '{"status": 1.5}',
    '{"status": "1"}',
    '{"status": ["EXECUTION_STATUS_SUCCESS"]}',
    # Doubles.
    '{"durationMs": "NaN"}',
    '{"durationMs": NaN}',
    '{"durationMs": Infinity}',
    '{"durationMs": -Infinity}',
    '{"durationMs": "Infinity"}',
    '{"durationMs": "-Infinity"}',
    '{"durationMs": "nan"}',
    '{"durationMs": "1.5"}',
    '{"durationMs": " 1.5"}',
    '{"durationMs": true}',
    '{"durationMs": 1e400}',
    '{"durationMs": 1e-400}',
    '{"durationMs": -0.0}',
    '{"durationMs": 123456789012345678901234567890}',
    '{"durationMs": 1' + "0" * 400 + "}",
    '{"durationMs": 9007199254740993}',
    '{"durationMs": [1]}',
    # Floats.
    '{"intentEmbedding": [1e39]}',
    '{"intentEmbedding": [-1e39]}',
    '{"intentEmbedding": [3.4028234663852886e38]}',
    '{"intentEmbedding": [3.4028235e38]}',
    '{"intentEmbedding": [3.4028236e38]}',
    '{"intentEmbedding": [1' + "0" * 39 + "]}",
    '{"intentEmbedding": [1e-46, 1e-7, 0.1, 16777217]}',
    '{"intentEmbedding": [null]}',
    '{"intentEmbedding": 1.0}',
    '{"intentEmbedding": ["1.5"]}',
    '{"intentEmbedding": ["NaN"]}',
    '{"intentEmbedding": [NaN]}',
    '{"intentEmbedding": {}}',
    # Bools and nested messages.
    '{"toolCalls": {}}',
    '{"toolCalls": [null]}',
    '{"toolCalls": [["tool"]]}',
    '{"toolCalls": ["tool"]}',
    '{"toolCalls": [{}]}',
    '{"toolCalls": [{"tool": "a", "bogus": 1}]}',
    '{"toolCalls": [{"tool": "a", "tool": "b"}]}',
    '{"toolCalls": [{"ok": "true"}]}',
    '{"toolCalls": [{"ok": 1}]}',
    '{"toolCalls": [{"ok": null}]}',
    '{"toolCalls": [{"arguments_json": "{}", "argumentsJson": "{}"}]}',
    '{"toolCalls": [{"startTime": "2024-13-01T00:00:00Z"}]}',
    # Timestamps.
    '{"startTime": "2024-01-02T03:04:05Z"}',
    '{"startTime": "2024-01-02T03:04:05.123456789+01:00"}',
    '{"startTime": "2024-01-02T03:04:05.1234567891Z"}',
    '{"startTime": "2024-01-02t03:04:05z"}',
    '{"startTime": "2024-01-02T03:04:05"}',
    '{"startTime": "1970-01-01T00:00:00Z"}',
    '{"startTime": "0001-01-01T00:00:00Z"}',
    '{"startTime": "9999-12-31T23:59:59.999999999Z"}',
    '{"startTime": "yesterday"}',
    '{"startTime": ""}',
    '{"startTime": 5}',
    '{"startTime": {}}',
    '{"startTime": {"seconds": 5}}',
    # Bytes.
    '{"trace": "aGVsbG8="}',
    '{"trace": "aGVsbG8"}',
    '{"trace": "a"}',
    '{"trace": "!!"}',
    '{"trace": "-_-_"}',
    '{"trace": "+/+/"}',
    '{"trace": "\\u00e9"}',
    '{"trace": "\\ud800"}',
    '{"trace": 5}',
    '{"trace": ["aGk="]}',
    # Valid, the usual shape.
    '{"intent": "a", "status": "EXECUTION_STATUS_SUCCESS", '
    '"toolCalls": [{"tool": "x", "ok": true, "durationMs": 3}]}',
]


@pytest.mark.parametrize("text", _MALFORMED)
def test_same_result_or_same_error_as_json_format(text: str) -> None:
    _assert_same(text)


def test_the_dev_set_import_file_parses_as_json_format_parses_it(tmp_path: Path) -> None:
    if not devset_workload.DEVSET.is_file():
        pytest.skip(f"no dev set at {devset_workload.DEVSET}")
    path = tmp_path / "executions.jsonl"
    count = devset_workload.write_jsonl(path, "imp")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == count
    for line in lines:
        _fast_only(line)
