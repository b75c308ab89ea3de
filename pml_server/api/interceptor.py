"""One server interceptor: maps every exception to its status (via `errors`), counts and times
each call for Prometheus and writes one structured log line per failed call (not for quota
refusals, which the counters record: a flood must not turn into a flood of log lines).

It also refuses the calls of a tenant already over quota before they cost anything
(`admission.EarlyRefusal`).

It also decodes pml's request messages itself: grpcio answers undecodable bytes (or messages
nested past the parser's depth limit) with INTERNAL before any handler runs, which would blame
the server for a client mistake. Here they become INVALID_ARGUMENT naming the message."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from pml_server.api import errors
from pml_server.api.admission.refusal import EarlyRefusal, Refuse
from pml_server.api.metrics import Metrics
from pml_server.domain.errors import FieldViolation, InvalidArgumentError, ResourceExhaustedError

log = logging.getLogger("pml.rpc")

Behavior = Callable[[Any, grpc.ServicerContext], Any]
Decoder = Callable[[bytes], Any]
# pml's services and the OTLP trace ingest it serves (api/otlp.py): both get early refusal and
# INVALID_ARGUMENT for undecodable requests.
_OWN_PREFIX = ("/pml.v1.", "/opentelemetry.proto.collector.trace.v1.")


def _decoded(decode: Decoder, raw: bytes) -> Any:
    try:
        return decode(raw)
    except DecodeError as err:
        raise InvalidArgumentError(
            FieldViolation("request", f"not a valid protobuf message for this method: {err}")
        ) from None


def _decoding_unary(inner: Behavior, decode: Decoder) -> Behavior:
    def behavior(raw: bytes, context: grpc.ServicerContext) -> Any:
        return inner(_decoded(decode, raw), context)

    return behavior


def _decoding_stream(inner: Behavior, decode: Decoder) -> Behavior:
    def behavior(raw_iterator: Iterator[bytes], context: grpc.ServicerContext) -> Any:
        return inner((_decoded(decode, raw) for raw in raw_iterator), context)

    return behavior


def _is_quota_refusal(exc: BaseException) -> bool:
    return isinstance(exc, ResourceExhaustedError) and exc.retry_after_seconds is not None


class ApiInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, metrics: Metrics, early: EarlyRefusal | None = None) -> None:
        self._metrics = metrics
        self._early = early
        # Wrapped handlers, built once per method (and per refusal status): this runs in
        # grpcio's poll thread for every call, so it must stay a few dict lookups.
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._refusing: dict[tuple[str, int], grpc.RpcMethodHandler] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
        if self._early is not None and method.startswith(_OWN_PREFIX):
            status = self._early.status_for(handler_call_details.invocation_metadata)
            if status is not None:
                return self._refusing_handler(handler, method, status)
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _refusing_handler(
        self, handler: grpc.RpcMethodHandler, method: str, status: grpc.Status
    ) -> grpc.RpcMethodHandler:
        key = (method, id(status))
        refusing = self._refusing.get(key)
        if refusing is None:
            assert self._early is not None
            short = method.rsplit("/", 1)[-1]
            code = status.code.name
            requests = self._metrics.requests.labels(short, code)
            rejections = self._metrics.rejections.labels(code)

            def count() -> None:
                requests.inc()
                rejections.inc()

            refuse = Refuse(self._early.pool, status, count)
            # No deserializer: the request bytes are never decoded (or even read, for streams).
            kwargs: dict[str, Any] = {"request_deserializer": None, "response_serializer": None}
            if handler.unary_unary:
                refusing = grpc.unary_unary_rpc_method_handler(refuse, **kwargs)
            elif handler.stream_unary:
                refusing = grpc.stream_unary_rpc_method_handler(refuse, **kwargs)
            elif handler.unary_stream:
                refusing = grpc.unary_stream_rpc_method_handler(refuse, **kwargs)
            else:
                refusing = grpc.stream_stream_rpc_method_handler(refuse, **kwargs)
            self._refusing[key] = refusing
        return refusing

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        decode = handler.request_deserializer
        ours = method.startswith(_OWN_PREFIX) and decode is not None
        kwargs = {
            "request_deserializer": None if ours else decode,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            inner = _decoding_unary(handler.unary_unary, decode) if ours else handler.unary_unary
            return grpc.unary_unary_rpc_method_handler(self._unary(inner, method), **kwargs)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, method), **kwargs
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, method), **kwargs
            )
        inner = _decoding_stream(handler.stream_stream, decode) if ours else handler.stream_stream
        return grpc.stream_stream_rpc_method_handler(self._streaming(inner, method), **kwargs)

    def _finish(self, method: str, code: grpc.StatusCode, started: float, exc: Any) -> None:
        short = method.rsplit("/", 1)[-1]
        self._metrics.requests.labels(short, code.name).inc()
        self._metrics.latency.labels(short).observe(time.perf_counter() - started)
        if code is not grpc.StatusCode.OK and exc is not None:
            self._metrics.rejections.labels(code.name).inc()
            if _is_quota_refusal(exc):
                return
            detail = errors.logged_detail(exc)
            log.info("rpc failed", extra={"method": method, "code": code.name, **detail})

    def _unary(self, inner: Behavior, method: str) -> Behavior:
        def behavior(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                reply = inner(request, context)
            except Exception as exc:
                if _client_gone(exc, context):
                    self._finish(method, _gone(context), started, None)
                    return None  # nobody is there to answer
                self._finish(method, errors.status_code_for(exc), started, exc)
                errors.abort(context, exc, method)
                raise  # unreachable: abort raises
            self._finish(method, grpc.StatusCode.OK, started, None)
            return reply

        return behavior

    def _streaming(self, inner: Behavior, method: str) -> Behavior:
        def behavior(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            started = time.perf_counter()
            try:
                yield from inner(request, context)
            except GeneratorExit:
                # grpcio closes the responses of a call that ended under them: the client
                # cancelled or its deadline ran out (docs/reliability.md, Clients that give up).
                self._finish(method, _gone(context), started, None)
                raise
            except Exception as exc:
                if _client_gone(exc, context):
                    self._finish(method, _gone(context), started, None)
                    return
                self._finish(method, errors.status_code_for(exc), started, exc)
                errors.abort(context, exc, method)
                raise  # unreachable: abort raises
            # A stream whose client left with nothing in flight ends normally here.
            code = grpc.StatusCode.OK if context.is_active() else _gone(context)
            self._finish(method, code, started, None)

        return behavior


def _client_gone(exc: Exception, context: grpc.ServicerContext) -> bool:
    """`exc` is grpcio's word that the call ended under the handler: a request iterator raises
    a bare RpcError once the client cancelled or its deadline ran out (a reflection stream
    grpcurl drops, say). Not a server fault: it was logged "internal error" with a traceback
    and counted INTERNAL, once per such call."""
    return isinstance(exc, grpc.RpcError) and not context.is_active()


def _gone(context: grpc.ServicerContext) -> grpc.StatusCode:
    """How a call whose client is gone ended: its deadline ran out, or it was cancelled."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return grpc.StatusCode.CANCELLED
