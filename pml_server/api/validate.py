"""Request validation at the API edge: every problem found at once, each named by its field path
in request terms (`record.tool_calls[2].tool`). The engine validates again; this layer makes sure
a client mistake is answered INVALID_ARGUMENT with BadRequest details before any work is done.
Every bound comes from the one table, `pml_server.domain.limits` (the server's configured one)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from google.protobuf import timestamp_pb2

from pml_server._proto.pml.v1 import pml_pb2
from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import (
    LIMITS,
    Limit,
    Limits,
    intent_problem,
    language_problem,
    request_id_problem,
    resource_id_problem,
    session_id_problem,
    tool_name_problem,
    unseen_character_problem,
)
from pml_server.domain.vectors import CheckedVector, check_vector

DEFAULT_PAGE_SIZE = 50
DEFAULT_SUGGESTIONS = 5


class Violations:
    """Collects violations; `raise_if_any` raises them together."""

    def __init__(self) -> None:
        self.items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self.items.append(FieldViolation(field, description))

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidArgumentError(self.items)


def check_text(
    out: Violations, field: str, value: str, limit: Limit, required: bool = False
) -> None:
    """`value` of the request field `field` (its full path) within `limit`."""
    if required and not value.strip():
        out.add(field, "must not be empty")
    excess = limit.excess(value)
    if excess is not None:
        out.add(field, excess)


def check_intent(out: Violations, field: str, intent: str, limits: Limits) -> None:
    check_text(out, field, intent, limits.intent, required=True)
    if intent.strip() and (problem := intent_problem(intent)) is not None:
        out.add(field, problem)


def check_request_id(out: Violations, field: str, request_id: str, required: bool) -> None:
    """A request id (empty: none, refused when `required`): `request_id_problem`."""
    if not request_id:
        if required:
            out.add(field, "must not be empty")
    elif (problem := request_id_problem(request_id)) is not None:
        out.add(field, problem)


def check_language(out: Violations, field: str, language: str) -> None:
    """A record's language: required, `language_problem`."""
    if not language.strip():
        out.add(field, "must not be empty")
    elif (problem := language_problem(language)) is not None:
        out.add(field, problem)


def check_session_id(out: Violations, field: str, session_id: str) -> None:
    """An optional session id (empty: none): docs/ranking.md, Sessions."""
    if session_id and (problem := session_id_problem(session_id)) is not None:
        out.add(field, problem)


def check_context(out: Violations, msg: pml_pb2.SuggestContext, limits: Limits) -> None:
    """Suggest's context: a session id and at most so many previous patterns (each
    `patterns/{pattern}` or a bare id) and tools."""
    check_session_id(out, "context.session_id", msg.session_id)
    for values, limit, each in (
        (msg.previous_patterns, limits.previous_patterns, limits.resource_id),
        (msg.previous_tools, limits.previous_tools, limits.tool),
    ):
        if (too_many := limit.excess(values)) is not None:
            out.add(limit.field, too_many)
            continue
        for i, value in enumerate(values):
            if limit is limits.previous_patterns:
                check_pattern_id(out, f"{limit.field}[{i}]", value, each)
            else:
                check_tool_name(out, f"{limit.field}[{i}]", value, limits)


def check_pattern_id(out: Violations, field: str, name: str, limit: Limit) -> None:
    """`patterns/{pattern}` or the bare id, as `resource_id` reads a name."""
    pattern_id = name.removeprefix("patterns/")
    if (excess := limit.excess(pattern_id)) is not None:
        out.add(field, excess)
    elif resource_id_problem(pattern_id) is not None:
        out.add(field, f"must be `patterns/{{pattern}}` or a pattern id, got {name!r}")


def check_available_tools(out: Violations, tools: Sequence[str], limits: Limits) -> None:
    """`available_tools.tools`: at most so many, each a tool name as a record's would be."""
    limit = limits.available_tools
    if (too_many := limit.excess(tools)) is not None:
        out.add(limit.field, too_many)
        return
    for i, tool in enumerate(tools):
        check_tool_name(out, f"{limit.field}[{i}]", tool, limits)


# The seconds a `google.protobuf.Timestamp` may hold: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
FIRST_SECOND, LAST_SECOND = -62_135_596_800, 253_402_300_799


def check_timestamp(out: Violations, field: str, ts: timestamp_pb2.Timestamp) -> None:
    """A Timestamp in its documented range, nanos 0..999,999,999: proto3 keeps any numbers a
    client sends, and one out of range (nanos -1, seconds 2^62) was taken without a word."""
    if not (FIRST_SECOND <= ts.seconds <= LAST_SECOND and 0 <= ts.nanos <= 999_999_999):
        out.add(
            field,
            f"is not a valid Timestamp (seconds {ts.seconds}, nanos {ts.nanos}): seconds "
            f"{FIRST_SECOND}..{LAST_SECOND} (years 1 to 9999), nanos 0..999999999",
        )


def check_code(out: Violations, field: str, code: str, limits: Limits) -> None:
    check_text(out, field, code, limits.code, required=True)


def check_embedding(
    out: Violations, field: str, values: Sequence[float], dim: int
) -> CheckedVector | None:
    """A client-supplied vector checked as the engine checks it (`domain.vectors.check_vector`);
    returns it L2-normalized as a `CheckedVector` (None when absent or bad), the float32 form the
    engine indexes, so the engine does not convert or check it again."""
    vector, problems = check_vector(values, dim, field)
    out.items.extend(problems)
    return None if vector is None else CheckedVector(vector)


def check_tags(out: Violations, field: str, tags: Sequence[str], limits: Limits) -> None:
    excess = limits.tags.excess(tags)
    if excess is not None:
        out.add(field, excess)
        return
    for i, tag in enumerate(tags):
        check_text(out, f"{field}[{i}]", tag, limits.tag, required=True)
        if (problem := unseen_character_problem(tag)) is not None:
            out.add(f"{field}[{i}]", problem)


def check_tool_name(out: Violations, field: str, tool: str, limits: Limits) -> None:
    """A tool name: not empty, within its limit, `tool_name_problem`."""
    check_text(out, field, tool, limits.tool, required=True)
    if tool.strip() and (problem := tool_name_problem(tool)) is not None:
        out.add(field, problem)


def check_tool_call(
    out: Violations, field: str, tool: str, arguments_json: str, error: str, limits: Limits
) -> None:
    check_tool_name(out, f"{field}.tool", tool, limits)
    check_text(out, f"{field}.error", error, limits.error)
    excess = limits.arguments_json.excess(arguments_json)
    if excess is not None:
        out.add(f"{field}.arguments_json", excess)
    elif arguments_json:
        try:
            json.loads(arguments_json)
        except ValueError as err:
            out.add(f"{field}.arguments_json", f"is not valid JSON: {err}")
        except RecursionError:  # json.loads recurses per nesting level
            out.add(f"{field}.arguments_json", "is nested too deeply")


def page_size(value: int, field: str = "page_size") -> int:
    bound = LIMITS.page_size.bound
    if value < 0 or value > bound:
        raise InvalidArgumentError(
            FieldViolation(field, f"must be 1..{bound} (0 means {DEFAULT_PAGE_SIZE})")
        )
    return value or DEFAULT_PAGE_SIZE


def suggestion_count(value: int, field: str = "page_size") -> int:
    bound = LIMITS.suggestions.bound
    if value < 0 or value > bound:
        raise InvalidArgumentError(
            FieldViolation(field, f"must be 1..{bound} (0 means {DEFAULT_SUGGESTIONS})")
        )
    return value or DEFAULT_SUGGESTIONS


def unit_interval(out: Violations, field: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        out.add(field, "must be between 0 and 1")


def resource_id(name: str, collection: str, field: str = "name") -> str:
    """The id in `collection/{id}`; INVALID_ARGUMENT naming `field` otherwise."""
    prefix = f"{collection}/"
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    if resource_id_problem(rest) is not None:
        raise InvalidArgumentError(
            FieldViolation(field, f"must be a resource name `{collection}/{{id}}`, got {name!r}")
        )
    return rest
