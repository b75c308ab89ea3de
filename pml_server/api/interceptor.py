"""One server interceptor: maps every exception to its status (via `errors`), counts and times
each call for Prometheus and writes one structured log line per failed call.

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
from pml_server.api.metrics import Metrics
from pml_server.domain.errors import FieldViolation, InvalidArgumentError

log = logging.getLogger("pml.rpc")

Behavior = Callable[[Any, grpc.ServicerContext], Any]
Decoder = Callable[[bytes], Any]
_OWN_PREFIX = "/pml.v1."


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


class ApiInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
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
        if code is not grpc.StatusCode.OK:
            self._metrics.rejections.labels(code.name).inc()
            log.info(
                "rpc failed",
                extra={"method": method, "code": code.name, "error": str(exc)[:500]},
            )

    def _unary(self, inner: Behavior, method: str) -> Behavior:
        def behavior(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                reply = inner(request, context)
            except Exception as exc:
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
            except Exception as exc:
                self._finish(method, errors.status_code_for(exc), started, exc)
                errors.abort(context, exc, method)
                raise  # unreachable: abort raises
            self._finish(method, grpc.StatusCode.OK, started, None)

        return behavior
