"""The one place where domain errors become gRPC statuses.

Every domain error class maps to one status code; invalid input carries `google.rpc.BadRequest`
field violations; UNAVAILABLE, and RESOURCE_EXHAUSTED from a quota, carry `google.rpc.RetryInfo`
and the `grpc-retry-pushback-ms` trailer (which grpcio's own retry policy obeys when a client
enables one). Anything else raised by a handler is a server bug: it is logged with its traceback
and answered INTERNAL without details, so a client mistake can never surface as UNKNOWN or
INTERNAL (validation raises domain errors first).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from pml_server.domain import errors as domain
from pml_server.domain.errors import clipped, logged_error

log = logging.getLogger(__name__)

# Ordered from the most specific class; the first isinstance match wins.
_CODES: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (domain.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (domain.NotFoundError, grpc.StatusCode.NOT_FOUND),
    (domain.AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (domain.FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (domain.ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (domain.UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (domain.UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (domain.PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
)
# The Rust core raises classes of the same tree (its argument and size errors are
# InvalidArgumentErrors naming their field; corrupt data is a server fault: INTERNAL), and the
# store's StoreClosedError is an UnavailableError: every status is decided here, once.

UNAVAILABLE_RETRY_SECONDS = 1.0
PUSHBACK_TRAILER = "grpc-retry-pushback-ms"


def status_code_for(exc: BaseException) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def is_client_facing(exc: BaseException) -> bool:
    return status_code_for(exc) is not grpc.StatusCode.INTERNAL


# A status travels in the call's trailers (`grpc-message`, percent-encoded, and
# `grpc-status-details-bin`, base64), and a client drops trailers past its metadata limit (gRPC
# core's default: 8 KiB, refused at random from there, always past 16 KiB): the caller then sees
# RESOURCE_EXHAUSTED "received metadata size exceeds ..." instead of the status, and no field.
# A request can make its own status that large (a 100 kB name echoed back, a thousand blank tool
# names each a violation), so both trailers are bounded here, together well under 8 KiB.
MAX_STATUS_MESSAGE_BYTES = 2048  # `grpc-message` as sent, percent-encoded
MAX_DETAILS_BYTES = 3072  # the serialized BadRequest, before base64
MAX_VIOLATION_CHARS = 256  # one violation's field path or description


def _encoded_size(text: str) -> int:
    """Bytes of `text` as `grpc-message` percent-encodes it (printable ASCII but `%` as is)."""
    return sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in text.encode())


def _bounded_violations(
    violations: Sequence[domain.FieldViolation],
) -> tuple[list[error_details_pb2.BadRequest.FieldViolation], int]:
    """The first violations whose BadRequest fits `MAX_DETAILS_BYTES`, each clipped; and how
    many were left out."""
    kept: list[error_details_pb2.BadRequest.FieldViolation] = []
    size = 0
    for v in violations:
        item = error_details_pb2.BadRequest.FieldViolation(
            field=clipped(v.field, MAX_VIOLATION_CHARS),
            description=clipped(v.description, MAX_VIOLATION_CHARS),
        )
        cost = item.ByteSize() + 4  # its tag and length in the BadRequest
        if kept and size + cost > MAX_DETAILS_BYTES:
            break
        kept.append(item)
        size += cost
    return kept, len(violations) - len(kept)


# Refusals of what the caller sent: their messages may quote it (a pattern name, a request id),
# the caller's own to read in the answer, but no log's to keep (docs/operations.md, Secrets
# outside the store).
_QUOTING_THE_REQUEST = (
    domain.InvalidArgumentError,
    domain.NotFoundError,
    domain.AlreadyExistsError,
)
_FIELDS_LOGGED = 20


def logged_detail(exc: BaseException) -> dict[str, object]:
    """What the log line of a refused call says of `exc`: the fields an INVALID_ARGUMENT names
    (never their descriptions), nothing more of another refusal of the request, and the message
    of a refusal the server made of its own state (draining, a quota, the store unavailable)."""
    if isinstance(exc, domain.InvalidArgumentError):
        fields = [clipped(v.field, MAX_VIOLATION_CHARS) for v in exc.violations[:_FIELDS_LOGGED]]
        return {"fields": fields, "invalid_fields": len(exc.violations)}
    if isinstance(exc, _QUOTING_THE_REQUEST):
        return {}
    return {"error": logged_error(exc)}


def to_rpc_status(exc: BaseException) -> status_pb2.Status:
    """The `google.rpc.Status` for `exc`, with rich details where they help the caller; small
    enough to fit any client's trailers (`MAX_STATUS_MESSAGE_BYTES`, `MAX_DETAILS_BYTES`)."""
    code = status_code_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        return status_pb2.Status(code=code_pb2.INTERNAL, message="internal error")
    message, tail = str(exc) or code.name.lower(), ""
    detail = None
    if isinstance(exc, domain.InvalidArgumentError):
        kept, left_out = _bounded_violations(exc.violations)
        detail = error_details_pb2.BadRequest(field_violations=kept)
        if left_out:
            message = "; ".join(f"{v.field}: {v.description}" for v in kept)
            tail = f"; and {left_out} more invalid fields"
    message = clipped(message, MAX_STATUS_MESSAGE_BYTES - len(tail), _encoded_size) + tail
    status = status_pb2.Status(code=code.value[0], message=message)
    if detail is not None:
        _pack(status, detail)
    else:
        delay = retry_after_seconds(exc)
        if delay is not None:
            retry_delay = duration_pb2.Duration()
            retry_delay.FromNanoseconds(round(delay * 1e9))
            _pack(status, error_details_pb2.RetryInfo(retry_delay=retry_delay))
    return status


def retry_after_seconds(exc: BaseException) -> float | None:
    """How long the caller should wait before retrying, when waiting helps."""
    if isinstance(exc, domain.UnavailableError):
        return UNAVAILABLE_RETRY_SECONDS
    if isinstance(exc, domain.ResourceExhaustedError):
        return exc.retry_after_seconds
    return None


@dataclass(frozen=True)
class _Status(grpc.Status):  # type: ignore[misc]
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def grpc_status(exc: BaseException) -> grpc.Status:
    """What `abort` sends for `exc`: code, message, the rich status (details trailer) and, when
    waiting helps, the pushback trailer. Immutable, so a constant refusal can be built once."""
    rich = to_rpc_status(exc)
    trailers: tuple[tuple[str, str | bytes], ...] = (
        ("grpc-status-details-bin", rich.SerializeToString()),
    )
    delay = retry_after_seconds(exc) if is_client_facing(exc) else None
    if delay is not None:
        trailers += ((PUSHBACK_TRAILER, str(max(1, math.ceil(delay * 1e3)))),)
    return _Status(status_code_for(exc), rich.message, trailers)


def _pack(status: status_pb2.Status, detail: object) -> None:
    packed = any_pb2.Any()
    packed.Pack(detail)  # type: ignore[arg-type]
    status.details.append(packed)


def abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call with the status for `exc` (raises, as `context.abort` does)."""
    if not is_client_facing(exc):
        log.error("internal error in %s", method, exc_info=exc)
    context.abort_with_status(grpc_status(exc))
