"""One server interceptor: maps every exception to its status (via `errors`), counts and times
each call for Prometheus and writes one structured log line per failed call."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from pml_server.api import errors
from pml_server.api.metrics import Metrics

log = logging.getLogger("pml.rpc")

Behavior = Callable[[Any, grpc.ServicerContext], Any]


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
        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method), **kwargs
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, method), **kwargs
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, method), **kwargs
            )
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(handler.stream_stream, method), **kwargs
        )

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
