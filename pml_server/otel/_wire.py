"""An Export's protobuf bytes as a request, a string that is not UTF-8 read with U+FFFD in place
of its broken sequences (docs/capture.md, "OTLP traces", Text that is not UTF-8).

Protobuf's parser refuses a whole message for one `string` field that is not valid UTF-8, and
nothing on the way need check it: the Collector's OTLP receiver does not, and passes such bytes
on. One HTTP span's URL with a Latin-1 byte would refuse the whole Export, and every run in
it, with INVALID_ARGUMENT (which an exporter drops, never retries). So a message the parser
refuses is walked once, its strings made valid as a UTF-8 decoder does, and parsed again;
bytes that are not protobuf are still refused."""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

# The parser's own nesting bound: deeper, the message is refused whatever its strings.
_MAX_DEPTH = 100
# An attribute value (AnyValue) nested this deep in the Export's messages is cut to an empty
# value (docs/capture.md, "Values nested too deep"): the parser refuses past `_MAX_DEPTH`, and
# only an AnyValue nests without end (kvlist in kvlist...). A cut AnyValue's parents are at
# most this deep, under the parser's bound.
CUT_DEPTH = 90
_ANY_VALUE = "opentelemetry.proto.common.v1.AnyValue"
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def parse_export(raw: bytes) -> ExportTraceServiceRequest:
    """`raw` as an `ExportTraceServiceRequest`; DecodeError when it is not one even with its
    strings made valid UTF-8 and its attribute values nested too deep cut."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except DecodeError:
        fixed = _valid_strings(memoryview(raw), ExportTraceServiceRequest.DESCRIPTOR, 0)
        if fixed is None or fixed == raw:
            raise
        request = ExportTraceServiceRequest()
        request.ParseFromString(fixed)
    return request


def _varint(data: memoryview, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None


def _encoded_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _valid_strings(data: memoryview, message: Descriptor, depth: int) -> bytes | None:
    """`data` (a `message`) with every string field, at any depth, made valid UTF-8 and every
    AnyValue deeper than `CUT_DEPTH` emptied; None when `data` is not a well-formed message
    (groups included: OTLP has none). A view of each nested message is walked, never a copy (a
    message nested 100 deep would be copied 100 times)."""
    if depth > _MAX_DEPTH:
        return None
    out = bytearray()
    pos = 0
    while pos < len(data):
        start = pos
        key = _varint(data, pos)
        if key is None:
            return None
        tag, pos = key
        wire = tag & 7
        if wire == _VARINT:
            value = _varint(data, pos)
            if value is None:
                return None
            pos = value[1]
        elif wire in (_FIXED64, _FIXED32):
            pos += 8 if wire == _FIXED64 else 4
        elif wire == _LENGTH:
            length = _varint(data, pos)
            if length is None or length[1] + length[0] > len(data):
                return None
            payload_start, end = length[1], length[1] + length[0]
            view = data[payload_start:end]
            payload: bytes | memoryview = view
            field = message.fields_by_number.get(tag >> 3)
            if field is not None and field.type == FieldDescriptor.TYPE_STRING:
                payload = str(view, "utf-8", "replace").encode()
            elif (
                field is not None
                and field.message_type is not None
                and field.message_type.full_name == _ANY_VALUE
                and depth + 1 > CUT_DEPTH
            ):
                payload = b""  # an AnyValue holding no value: read as none
            elif (
                field is not None
                and field.message_type is not None
                # ASCII: every string in it is UTF-8; and too short (2 bytes a level at least)
                # to nest an AnyValue past `CUT_DEPTH`.
                and not (view.tobytes().isascii() and depth + len(view) // 2 < CUT_DEPTH)
            ):
                inner = _valid_strings(view, field.message_type, depth + 1)
                if inner is None:
                    return None
                payload = inner
            out += data[start:pos]
            out += _encoded_varint(len(payload))
            out += payload
            pos = end
            continue
        else:
            return None
        if pos > len(data):
            return None
        out += data[start:pos]
    return bytes(out)
