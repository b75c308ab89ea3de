"""The one place where domain errors become gRPC statuses.

Every domain error class maps to one status code; invalid input carries `google.rpc.BadRequest`
field violations and UNAVAILABLE carries `google.rpc.RetryInfo`. Anything else raised by a handler
is a server bug: it is logged with its traceback and answered INTERNAL without details, so a
client mistake can never surface as UNKNOWN or INTERNAL (validation raises domain errors first).
"""

from __future__ import annotations

import logging

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from pml_server import _core
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
    # The Rust core's input errors reach us only if the engine let one through unwrapped.
    (_core.InputTooLargeError, grpc.StatusCode.INVALID_ARGUMENT),
    (_core.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
)

UNAVAILABLE_RETRY_SECONDS = 1


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
    elif isinstance(exc, domain.UnavailableError):
        _pack(
            status,
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=UNAVAILABLE_RETRY_SECONDS)
            ),
        )
    return status


def _pack(status: status_pb2.Status, detail: object) -> None:
    packed = any_pb2.Any()
    packed.Pack(detail)  # type: ignore[arg-type]
    status.details.append(packed)


def abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call with the status for `exc` (raises, as `context.abort` does)."""
    from grpc_status import rpc_status

    if not is_client_facing(exc):
        log.error("internal error in %s", method, exc_info=exc)
    context.abort_with_status(rpc_status.to_status(to_rpc_status(exc)))
