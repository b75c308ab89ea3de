"""Hypothesis strategies that build any pml request message from its descriptor: every field,
hostile values included (extreme integers, NaN/inf, unknown enum numbers, odd and oversized
strings, resource names that try to escape), nested messages and repeated fields."""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}

INTERESTING_STRINGS = [
    "",
    " ",
    "\t\n",
    "\x00",
    "patterns/1",
    "patterns/",
    "capabilities/1",
    "patterns/../x",
    "patterns/1/../../capabilities/2",
    "tenants/other/patterns/1",
    "javascript",
    "python",
    "typescript",
    "await mcp.read_file({path: 'a'})",
    "{",
    "}" * 500,
    "Ünïcødé ✓ 𝄞",
    "x" * 300_000,
    "[" * 10_000,
    '{"a":' * 2_000,
    "%s%n%x",
    "' OR 1=1 --",
    "\u202e",
]


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo else 1]))
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32, allow_nan=True, allow_infinity=True)
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.integers(-3, 12)  # open enums: unknown numbers are legal on the wire
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if kind == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.text(max_size=40), st.sampled_from(INTERESTING_STRINGS))
    raise ValueError(f"no strategy for {field.full_name}")


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of `descriptor`'s type, each field present or not."""
    cls = message_factory.GetMessageClass(descriptor)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3:
                continue
            value: st.SearchStrategy[Any] = messages(field.message_type, depth + 1)
        else:
            value = _scalar(field)
        if field.is_repeated:
            value = st.lists(value, max_size=5 if depth else 300)
        fields[field.name] = value
    return st.fixed_dictionaries({}, optional=fields).map(lambda kw: cls(**kw))


def _scalar_paths(
    descriptor: Descriptor, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], FieldDescriptor]]:
    paths: list[tuple[tuple[str, ...], FieldDescriptor]] = []
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if not field.is_repeated and len(prefix) < 2:
                paths += _scalar_paths(field.message_type, (*prefix, field.name))
        else:
            paths.append(((*prefix, field.name), field))
    return paths


def one_field_changed(base: Message) -> st.SearchStrategy[Message]:
    """`base` (a valid request) with one scalar field, however deep, set to a hostile value:
    these get past the first validation error and reach the engine."""
    paths = _scalar_paths(base.DESCRIPTOR)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        path, field = draw(st.sampled_from(paths))
        message = type(base)()
        message.CopyFrom(base)
        target = message
        for name in path[:-1]:
            target = getattr(target, name)
        if field.is_repeated:
            getattr(target, path[-1]).extend(draw(st.lists(_scalar(field), max_size=50)))
        else:
            setattr(target, path[-1], draw(_scalar(field)))
        return message

    return build()
