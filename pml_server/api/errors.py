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
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from pml_server.domain import errors as domain

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


def to_rpc_status(exc: BaseException) -> status_pb2.Status:
    """The `google.rpc.Status` for `exc`, with rich details where they help the caller."""
    code = status_code_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        return status_pb2.Status(code=code_pb2.INTERNAL, message="internal error")
    status = status_pb2.Status(code=code.value[0], message=str(exc) or code.name.lower())
    if isinstance(exc, domain.InvalidArgumentError):
        detail = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in exc.violations
            ]
        )
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
