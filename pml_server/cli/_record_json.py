"""`parse_execution_record`: one JSON line of `pml import` into an ExecutionRecord, the same as
`json_format.Parse` but several times faster.

Why: `pml import` parses every line on the client, and where the server saturates the cores (the
import benchmark on 2 cores) that CPU is taken from the server; `json_format.Parse` walks the
descriptors in pure Python (~60-90 µs a line). Here the line is decoded by the same `json` scanner
json_format uses and the message is built by one constructor call, for the values json_format
takes as they are: either field name (camelCase or proto), strings, bools, finite numbers, enum
names or known numbers, nested messages, RFC 3339 timestamps, base64 bytes.

Anything else (an unknown or repeated field, a null, a value of another type, a lone surrogate,
a float beyond float32, a bad timestamp, invalid JSON) goes to `json_format.Parse`, which parses
it again from the start: the result, and every error message, is always json_format's.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, timestamp_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from pml_client import resources_pb2


class _OutsideFastPathError(Exception):
    """A value outside the fast path: json_format decides."""


# Objects decode as tuples of (key, value) pairs and arrays as lists, so an empty object stays
# distinct from an empty array, and a key given twice reaches `_build` (as the same field twice)
# instead of being merged. json_format's `json.loads` differs only in rejecting that repeat (and
# a leading BOM, which fails here too): same scanner, same numbers and strings.
_DECODER = json.JSONDecoder(object_pairs_hook=tuple)
# json_format refuses a lone surrogate; a decoded string can hold no other surrogate, so any
# one sends the line to json_format.
_SURROGATE = re.compile("[\ud800-\udfff]")
# The largest float32, json_format's bound for a float field (type_checkers._FLOAT_MAX).
_FLOAT32_MAX = float.fromhex("0x1.fffffep+127")

Convert = Callable[[Any], Any]


def _string(value: Any) -> str:
    if type(value) is not str or (not value.isascii() and _SURROGATE.search(value)):
        raise _OutsideFastPathError
    return value


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _OutsideFastPathError
    return value


def _double(value: Any) -> float:
    # bool is no int here: json_format takes true as 1.0, a case left to it.
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) is int:
        return float(value)  # OverflowError past a double: json_format's to report
    raise _OutsideFastPathError


def _float32(value: Any) -> float:
    number = _double(value)
    if not -_FLOAT32_MAX <= number <= _FLOAT32_MAX:
        raise _OutsideFastPathError
    return number


def _bytes(value: Any) -> bytes:
    if type(value) is not str:
        raise _OutsideFastPathError
    encoded = value.encode("utf-8")
    # json_format's exact decoding (padding added, urlsafe alphabet), so the bytes are its bytes.
    return base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))


def _timestamp(value: Any) -> timestamp_pb2.Timestamp:
    if type(value) is not str:
        raise _OutsideFastPathError
    stamp = timestamp_pb2.Timestamp()
    stamp.FromJsonString(value)  # json_format's own call; ValueError: json_format reports it
    return stamp


def _enum(enum: EnumDescriptor) -> Convert:
    numbers = {value.name: value.number for value in enum.values}
    known = set(numbers.values())

    def convert(value: Any) -> int:
        if type(value) is str and value in numbers:
            return numbers[value]
        if type(value) is int and value in known:
            return value
        raise _OutsideFastPathError

    return convert


def _message(descriptor: Descriptor) -> Convert:
    fields = _fields(descriptor)

    def convert(value: Any) -> dict[str, Any]:
        if type(value) is not tuple:
            raise _OutsideFastPathError
        # The field values as a dict: the containing message's constructor makes the message
        # of them, in C, faster than a constructor call here.
        return _build(value, fields)

    return convert


def _repeated(item: Convert) -> Convert:
    def convert(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _OutsideFastPathError
        return [item(element) for element in value]

    return convert


_SCALARS: dict[int, Convert] = {
    FieldDescriptor.TYPE_STRING: _string,
    FieldDescriptor.TYPE_BOOL: _bool,
    FieldDescriptor.TYPE_DOUBLE: _double,
    FieldDescriptor.TYPE_FLOAT: _float32,
    FieldDescriptor.TYPE_BYTES: _bytes,
}


def _converter(field: FieldDescriptor) -> Convert | None:
    """None for a field the fast path leaves to json_format (integers, maps, oneofs, other
    well-known types): a line naming it is parsed by json_format."""
    if field.containing_oneof is not None:
        return None
    if (enum := field.enum_type) is not None:
        item: Convert | None = _enum(enum)
    elif (sub := field.message_type) is not None:
        if sub.full_name == "google.protobuf.Timestamp":
            item = _timestamp
        elif not sub.full_name.startswith("google.protobuf.") and not sub.GetOptions().map_entry:
            item = _message(sub)
        else:
            item = None
    else:
        item = _SCALARS.get(field.type)
    if item is None or not field.is_repeated:
        return item
    return _repeated(item)


def _fields(descriptor: Descriptor) -> dict[str, tuple[str, Convert]]:
    """JSON key (camelCase or proto name) -> (proto name, converter), as json_format accepts."""
    found: dict[str, tuple[str, Convert]] = {}
    for field in descriptor.fields:
        convert = _converter(field)
        if convert is not None:
            found[field.json_name] = found[field.name] = (field.name, convert)
    return found


def _build(
    pairs: tuple[tuple[str, Any], ...], fields: dict[str, tuple[str, Convert]]
) -> dict[str, Any]:
    """The constructor's keyword arguments (proto names) for the object's (key, value) pairs."""
    values: dict[str, Any] = {}
    for key, value in pairs:
        known = fields.get(key)
        # An unknown key, a key repeated or both names of one field: json_format decides.
        if known is None or known[0] in values:
            raise _OutsideFastPathError
        name, convert = known
        values[name] = convert(value)
    return values


_RECORD = _fields(resources_pb2.ExecutionRecord.DESCRIPTOR)


def parse_execution_record(line: str) -> resources_pb2.ExecutionRecord:
    """`json_format.Parse(line, ExecutionRecord())`, fast for the usual lines; raises
    json_format.ParseError exactly where and as it does."""
    # Whatever fails here (a value outside the fast path, invalid JSON, a bad timestamp or
    # base64...), json_format parses the line again and reports it.
    with contextlib.suppress(Exception):
        pairs = _DECODER.decode(line)
        if type(pairs) is tuple:
            return resources_pb2.ExecutionRecord(**_build(pairs, _RECORD))
    return json_format.Parse(line, resources_pb2.ExecutionRecord())
