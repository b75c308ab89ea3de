"""Request validation at the API edge: every problem found at once, each named by its field path
in request terms (`record.tool_calls[2].tool`). The engine validates again; this layer makes sure
a client mistake is answered INVALID_ARGUMENT with BadRequest details before any work is done."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.vectors import CheckedVector

MAX_SUGGESTIONS = 100
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 50
DEFAULT_SUGGESTIONS = 5


@dataclass(frozen=True)
class Limits:
    """Input limits; `max_code_bytes` and `max_tool_calls` follow the engine's configuration."""

    max_code_bytes: int = 256 * 1024
    max_tool_calls: int = 256
    max_intent_chars: int = 4096
    max_request_id_chars: int = 128
    max_tool_name_chars: int = 256
    max_arguments_bytes: int = 64 * 1024
    max_error_chars: int = 16 * 1024
    max_trace_bytes: int = 1024 * 1024
    max_tags: int = 32
    max_tag_chars: int = 64
    max_language_chars: int = 32
    max_open_executions: int = 1024
    # bytes of live executions (started + tool calls) one stream may buffer before they finish
    max_stream_buffered_bytes: int = 32 * 1024 * 1024


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
    out: Violations, field: str, value: str, max_chars: int, required: bool = False
) -> None:
    if required and not value.strip():
        out.add(field, "must not be empty")
    if len(value) > max_chars:
        out.add(field, f"is {len(value)} characters; the limit is {max_chars}")


def check_intent(out: Violations, field: str, intent: str, limits: Limits) -> None:
    check_text(out, field, intent, limits.max_intent_chars, required=True)
    if intent.strip() and not any(ch.isalnum() for ch in intent):
        # Nothing to embed or match: the hashing embedder would give a zero vector.
        out.add(field, "must contain at least one letter or digit")


def check_code(out: Violations, field: str, code: str, limits: Limits) -> None:
    if not code.strip():
        out.add(field, "must not be empty")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > limits.max_code_bytes:
        out.add(field, f"is {size} bytes; the limit is {limits.max_code_bytes} bytes")


def check_embedding(
    out: Violations, field: str, values: Sequence[float], dim: int
) -> CheckedVector | None:
    """Validate a client-supplied vector; returns it L2-normalized as float32 (None when
    absent or bad), the form the engine indexes, so it is not converted again. A protobuf
    repeated field is read once, through numpy: iterating it value by value costs several
    times more."""
    if not values:
        return None
    array = np.asarray(values, dtype=np.float64)
    if len(array) != dim:
        out.add(field, f"has {len(array)} values; this server's embedding dimension is {dim}")
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        out.add(f"{field}[{bad[0]}]", "must be a finite number (no NaN or infinity)")
        return None
    # The norm in float64: squared float32 values such as 1e20 overflow float32's range.
    norm = float(np.linalg.norm(array))
    if norm == 0.0:
        out.add(field, "must not be the zero vector (cosine similarity needs a direction)")
        return None
    if not math.isfinite(norm):
        out.add(field, "its norm is not a finite number")
        return None
    unit = (array / norm).astype(np.float32)
    if not unit.any():  # every value underflowed float32 once divided
        out.add(field, "must not be the zero vector (cosine similarity needs a direction)")
        return None
    return CheckedVector(unit)


def check_tags(out: Violations, field: str, tags: Sequence[str], limits: Limits) -> None:
    if len(tags) > limits.max_tags:
        out.add(field, f"has {len(tags)} tags; the limit is {limits.max_tags}")
        return
    for i, tag in enumerate(tags):
        check_text(out, f"{field}[{i}]", tag, limits.max_tag_chars, required=True)


def check_tool_call(
    out: Violations, field: str, tool: str, arguments_json: str, error: str, limits: Limits
) -> None:
    check_text(out, f"{field}.tool", tool, limits.max_tool_name_chars, required=True)
    check_text(out, f"{field}.error", error, limits.max_error_chars)
    if len(arguments_json.encode("utf-8", "surrogatepass")) > limits.max_arguments_bytes:
        out.add(f"{field}.arguments_json", f"exceeds {limits.max_arguments_bytes} bytes")
    elif arguments_json:
        try:
            json.loads(arguments_json)
        except ValueError as err:
            out.add(f"{field}.arguments_json", f"is not valid JSON: {err}")
        except RecursionError:  # json.loads recurses per nesting level
            out.add(f"{field}.arguments_json", "is nested too deeply")


def page_size(value: int, field: str = "page_size") -> int:
    if value < 0 or value > MAX_PAGE_SIZE:
        raise InvalidArgumentError(FieldViolation(field, f"must be 0..{MAX_PAGE_SIZE}"))
    return value or DEFAULT_PAGE_SIZE


def suggestion_count(value: int, field: str = "page_size") -> int:
    if value < 0 or value > MAX_SUGGESTIONS:
        raise InvalidArgumentError(
            FieldViolation(field, f"must be 1..{MAX_SUGGESTIONS} (0 means {DEFAULT_SUGGESTIONS})")
        )
    return value or DEFAULT_SUGGESTIONS


def unit_interval(out: Violations, field: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        out.add(field, "must be between 0 and 1")


def resource_id(name: str, collection: str, field: str = "name") -> str:
    """The id in `collection/{id}`; INVALID_ARGUMENT naming `field` otherwise."""
    prefix = f"{collection}/"
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    if not rest or "/" in rest or len(rest) > 256 or not rest.isprintable():
        raise InvalidArgumentError(
            FieldViolation(field, f"must be a resource name `{collection}/{{id}}`, got {name!r}")
        )
    return rest
