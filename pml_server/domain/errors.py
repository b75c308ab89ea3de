"""The domain's error tree. The API layer maps each class to one gRPC status code in one place
(`pml_server/api/errors.py`); domain code raises these and never a grpc type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The most of an error's message a log line keeps: a message may quote what a request or a
# stored row held (megabytes of it), and logs are kept (docs/operations.md, Secrets outside
# the store).
LOGGED_ERROR_CHARS = 500


def clipped(text: str, limit: int, size: Callable[[str], int] = len) -> str:
    """`text` cut (with a trailing "...") so that `size` of it is at most `limit`."""
    # Every character costs at least 1: a longer text never fits, and its first `limit`
    # characters hold the answer (a request may have put megabytes in it).
    if len(text) <= limit and size(text) <= limit:
        return text
    text = text[:limit]
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits with the marker
        mid = (low + high + 1) // 2
        if size(text[:mid] + "...") <= limit:
            low = mid
        else:
            high = mid - 1
    return text[:low] + "..."


def one_line(text: str) -> str:
    """`text` on one line: each line break (libpq's messages span several, a hint on a line
    of its own) and the blanks around it become one space, so an event is one log line."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def logged_error(exc: BaseException) -> str:
    """What a log line says of an error's message: one line, clipped."""
    return clipped(one_line(str(exc)), LOGGED_ERROR_CHARS)


@dataclass(frozen=True)
class FieldViolation:
    """One invalid field: `field` is a dotted path in request terms (`tool_calls[2].tool`)."""

    field: str
    description: str


class PmlError(Exception):
    """Base of every error pml raises on purpose."""


class InvalidArgumentError(PmlError):
    """The request is malformed; `violations` names every bad field."""

    def __init__(self, violations: list[FieldViolation] | FieldViolation) -> None:
        self.violations = [violations] if isinstance(violations, FieldViolation) else violations
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in self.violations))


class NotFoundError(PmlError):
    """The named object does not exist for this tenant (or never did: we do not say which)."""


class AlreadyExistsError(PmlError):
    """The object to create exists already."""


class FailedPreconditionError(PmlError):
    """The system is not in a state that allows the call (e.g. a store of another model)."""


class ResourceExhaustedError(PmlError):
    """A quota, rate limit or size limit was hit. `retry_after_seconds` is set when waiting
    helps (a quota frees up), unset when retrying the same request cannot (a size limit)."""

    def __init__(self, message: str, retry_after_seconds: float | None = None) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message)


class UnavailableError(PmlError):
    """Temporarily unable to serve (draining, index catching up); the caller may retry."""


class UnauthenticatedError(PmlError):
    """No valid credentials."""


class PermissionDeniedError(PmlError):
    """Valid credentials without the role the call needs."""


# ---- the Rust core's errors (pml_server._core raises these very classes) --------------------
# One conversion on the Rust side (`impl From<CoreError> for PyErr`,
# pml_core_rs/src/python/errors.rs) passes each variant's fields as constructor arguments;
# nothing reads a message back.


class CoreError(PmlError):
    """Base of every error pml's Rust core raises."""


class CoreArgumentError(CoreError, InvalidArgumentError):
    """An argument the core cannot use. `field` names the core function's argument (for
    `normalize` these are the record's own `code` and `language`), `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        InvalidArgumentError.__init__(self, FieldViolation(field, reason))
        self.args = (f"invalid argument `{field}`: {reason}",)


class InputTooLargeError(CoreError, InvalidArgumentError):
    """An input larger or deeper than the core accepts; `field` names it."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        InvalidArgumentError.__init__(self, FieldViolation(field, f"too large: {reason}"))
        self.args = (f"input too large: `{field}` {reason}",)


class CorruptDataError(CoreError):
    """Serialized bytes that are truncated, corrupted or of an unknown version (a server-side
    problem, never the caller's: it maps to INTERNAL)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"corrupt data: {reason}")
