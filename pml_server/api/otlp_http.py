"""OTLP/HTTP trace ingest: `POST /v1/traces`, binary protobuf or JSON, gzip or not, answered
by the same servicer as OTLP/gRPC (`pml_server.api.otlp`: keys, tenants, quotas, holding split
runs, partial success) and served by uvicorn on its own address beside the gRPC port
(docs/connect.md, "OTLP traces in"). The HTTP side follows the OTLP specification's
OTLP/HTTP section: the response in the request's encoding, a `google.rpc.Status` body for
every 4xx and 5xx, 429 and 503 with `Retry-After` for what is worth retrying."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import re
import ssl
import zlib
from collections.abc import Awaitable, Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from pml_server.api.errors import retry_after_seconds, status_code_for, to_rpc_status
from pml_server.api.http_body import Gone, read_body
from pml_server.api.http_deadline import ServedInThread, listener_config, listening_socket
from pml_server.api.otlp import refuse_past_bounds
from pml_server.config import bind_error
from pml_server.domain.errors import (
    FieldViolation,
    InvalidArgumentError,
    ResourceExhaustedError,
)
from pml_server.domain.limits import LIMITS
from pml_server.otel import CUT_DEPTH, parse_export, without_lone_surrogates

log = logging.getLogger(__name__)

PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
# The registered name of the same binary encoding (RFC 9996, which lists `application/x-protobuf`
# as its deprecated alias): taken too, and answered in it (docs/connect.md, "OTLP traces in").
PROTOBUF_REGISTERED = "application/protobuf"
JSON = "application/json"
_TAKEN = (PROTOBUF, PROTOBUF_REGISTERED, JSON)
# Exports answered at once (each holds an RPC-like thread while its spans are mapped and
# captured); uvicorn answers 503 past `_MAX_CONNECTIONS` open connections and requests.
_WORKERS = 4
_MAX_CONNECTIONS = 64

Metadata = Sequence[tuple[str, str | bytes]]
Export = Callable[
    [trace_service_pb2.ExportTraceServiceRequest, Metadata],
    trace_service_pb2.ExportTraceServiceResponse,
]
# Raises the refusal of a request with these headers before its body is inflated or parsed
# (`TraceIngestServicer.admit`: draining, the key, its role, the tenant's quota).
Admit = Callable[[Metadata], object]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _invalid(field: str, description: str) -> InvalidArgumentError:
    return InvalidArgumentError(FieldViolation(field, description))


class _UnsupportedError(Exception):
    """A request this endpoint does not take (415): another media type or content encoding,
    `header` naming which."""

    def __init__(self, header: str, message: str) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


# The span fields OTLP/JSON writes as hex (the protobuf JSON mapping would read base64).
_HEX_IDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_as_base64(obj: dict[str, Any], where: str) -> None:
    for key in _HEX_IDS:
        value = obj.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise _invalid(f"{where}.{key}", "must be a hex string")
        try:
            obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            raise _invalid(
                f"{where}.{key}", "must be hex (OTLP/JSON writes ids as hex, not base64)"
            ) from None


def _each(obj: dict[str, Any], *names: str) -> list[Any]:
    for name in names:
        value = obj.get(name)
        if value is not None:
            if not isinstance(value, list):
                raise _invalid(name, "must be an array")
            return value
    return []


def from_json(body: bytes) -> trace_service_pb2.ExportTraceServiceRequest:
    """An OTLP/JSON body: the protobuf JSON mapping, but trace and span ids in hex and unknown
    fields ignored (OTLP specification, "JSON Protobuf Encoding")."""
    try:
        # A lone surrogate escape (`"\\ud83d"`, a string cut inside an emoji) becomes U+FFFD:
        # kept, no protobuf string can hold it and the whole Export would be refused 400
        # (docs/connect.md, "OTLP traces in").
        data = without_lone_surrogates(json.loads(body), body)
    except (ValueError, RecursionError) as err:
        message = str(err) if isinstance(err, ValueError) else "nested too deep"
        raise _invalid("body", f"not JSON ({message})") from None
    if not isinstance(data, dict):
        raise _invalid("body", "must be a JSON object (ExportTraceServiceRequest)")
    groups = spans = 0  # counted as read: too many are refused before the protobuf mapping
    for r, resource in enumerate(_each(data, "resourceSpans", "resource_spans")):
        if not isinstance(resource, dict):
            raise _invalid(f"resourceSpans[{r}]", "must be an object")
        groups += 1
        refuse_past_bounds(LIMITS, groups, spans)
        for s, scope in enumerate(_each(resource, "scopeSpans", "scope_spans")):
            if not isinstance(scope, dict):
                raise _invalid(f"resourceSpans[{r}].scopeSpans[{s}]", "must be an object")
            groups += 1
            scope_spans = _each(scope, "spans")
            spans += len(scope_spans)
            refuse_past_bounds(LIMITS, groups, spans)
            for i, span in enumerate(scope_spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                if not isinstance(span, dict):
                    raise _invalid(where, "must be an object")
                _hex_ids_as_base64(span, where)
                for k, link in enumerate(_each(span, "links")):
                    if not isinstance(link, dict):
                        raise _invalid(f"{where}.links[{k}]", "must be an object")
                    _hex_ids_as_base64(link, f"{where}.links[{k}]")
    try:
        try:
            return _parsed(data)
        except json_format.ParseError as err:
            if "too deep" not in str(err):
                raise
            # An attribute value nested past the parser's bound: cut, as in protobuf.
            return _parsed(_without_deep_values(data, 0))
    except (json_format.ParseError, RecursionError, ValueError) as err:
        message = str(err) if not isinstance(err, RecursionError) else "nested too deep"
        field, reason = _where(message)
        raise _invalid(field, f"not an ExportTraceServiceRequest ({reason[:300]})") from None


_FAILED_FIELD = re.compile(r"Failed to parse (\w+) field: ")


def _where(message: str) -> tuple[str, str]:
    """The field path and reason of a JSON mapping error, which nests one `Failed to parse X
    field: ` per level: 300 characters of those hid the reason (the value refused) of a value
    nested in an event's attributes."""
    path = ["body"]
    while found := _FAILED_FIELD.match(message):
        path.append(found.group(1))
        message = message[found.end() :]
    return ".".join(path), message.rstrip(".")  # (one full stop a level)


def _parsed(data: dict[str, Any]) -> trace_service_pb2.ExportTraceServiceRequest:
    request = trace_service_pb2.ExportTraceServiceRequest()
    json_format.ParseDict(data, request, ignore_unknown_fields=True)
    return request


# The keys of an AnyValue's one value, in OTLP/JSON (camelCase) or the field names.
_ANY_VALUE_KEYS = frozenset(
    f"{kind}{suffix}"
    for kind in ("string", "bool", "int", "double", "array", "kvlist", "bytes")
    for suffix in ("Value", "_value")
)


def _without_deep_values(obj: Any, depth: int) -> Any:
    """`obj`, a message `depth` deep in the Export, with every AnyValue deeper than
    `otel._wire.CUT_DEPTH` emptied, as `parse_export` cuts them (docs/capture.md, "Values
    nested too deep"). Only an AnyValue nests that deep, so the walk ends there."""
    if isinstance(obj, list):
        return [_without_deep_values(item, depth) for item in obj]
    if not isinstance(obj, dict):
        return obj
    if depth > CUT_DEPTH and not _ANY_VALUE_KEYS.isdisjoint(obj):
        return {}
    return {key: _without_deep_values(item, depth + 1) for key, item in obj.items()}


# The content codings taken (docs/connect.md, "OTLP traces in"): gzip (RFC 1952), and deflate,
# which is the zlib format (RFC 1950; RFC 9110, section 8.4.1.2), what the OpenTelemetry SDKs
# send for it. The `zlib` window bits that read each.
_CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _inflate(body: bytes, max_bytes: int, coding: str) -> bytes:
    """A compressed body inflated, never past `max_bytes`. A gzip body: every member of it
    (RFC 1952: a gzip stream is a series of members, which a reader joins), bytes after the
    last that are not a member refused. A deflate body: its one zlib stream, nothing after it."""
    out = bytearray()
    rest = body
    members = 0
    while True:
        members += 1
        if members > (limit := LIMITS.gzip_members).bound:
            raise ResourceExhaustedError(
                f"{limit.field}: more than {limit.bound} gzip members (the limit): compress "
                "the Export as one member"
            )
        inflater = zlib.decompressobj(_CODINGS[coding])
        try:
            out += inflater.decompress(rest, max_bytes + 1 - len(out))
        except zlib.error as err:
            raise _invalid("body", f"not {coding} ({err})") from None
        if len(out) > max_bytes:
            raise ResourceExhaustedError(
                f"the body inflates past {max_bytes} bytes: export in smaller batches"
            )
        if not inflater.eof:
            raise _invalid("body", f"{coding} stream cut short")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)
        if coding != "gzip":
            raise _invalid("body", f"bytes after the {coding} stream")


def media_type(content_type: str) -> str:
    """The media type a `Content-Type` value names: without its parameters (`; charset=utf-8`),
    in lower case (media types are case-insensitive: RFC 9110, section 8.3.1)."""
    return content_type.split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class Sent:
    """The headers of a request that say how its body is encoded, read once for every path
    (the 413, the 415, the Export) from the header lines uvicorn hands on in order, repeats
    included (`scope["headers"]`; docs/connect.md, "OTLP traces in")."""

    content_type: str
    content_encoding: str


def sent(headers: Sequence[tuple[bytes, bytes]]) -> Sent:
    """`Content-Type` is one value (RFC 9110, section 8.3): sent more than once naming two
    media types, the request is refused 400 naming it (InvalidArgumentError), since no reading
    of it is the client's; repeats of one media type are that type. `Content-Encoding` is a
    list: its lines join with ", " (RFC 9110, section 5.3), each coding read."""
    types: list[str] = []
    codings: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == b"content-type":
            types.append(value.decode("latin-1"))
        elif key == b"content-encoding":
            codings.append(value.decode("latin-1"))
    if len({media_type(value) for value in types}) > 1:
        raise _invalid(
            "Content-Type",
            f"sent {len(types)} times with different media types "
            f"({', '.join(repr(media_type(value)) for value in types)}): send one",
        )
    return Sent(types[0] if types else "", ", ".join(codings))


def answer_type(content_type: str) -> str:
    """The media type of the answer to a request sent with `content_type`: the request's, as
    OTLP/HTTP requires, binary protobuf (`PROTOBUF`) for a type this endpoint does not take."""
    media = media_type(content_type)
    return media if media in _TAKEN else PROTOBUF


def decode(
    body: bytes, content_type: str, encoding: str, max_bytes: int
) -> trace_service_pb2.ExportTraceServiceRequest:
    """The request of a POST body. Raises InvalidArgumentError, ResourceExhaustedError or
    `_UnsupportedError`."""
    media = media_type(content_type)
    if media not in _TAKEN:
        raise _UnsupportedError(
            "Content-Type",
            f"{media or '(none)'!r} is not taken: send {PROTOBUF} (or {PROTOBUF_REGISTERED}) "
            f"or {JSON} (OTLP/HTTP)",
        )
    coding = encoding.strip().lower()
    if coding in _CODINGS:
        body = _inflate(body, max_bytes, coding)
    elif coding not in ("", "identity"):
        raise _UnsupportedError(
            "Content-Encoding", f"{coding!r} is not taken: send gzip, deflate or none"
        )
    if media == JSON:
        return from_json(body)
    try:
        return parse_export(body)
    except (DecodeError, RecursionError):
        raise _invalid("body", "not a protobuf ExportTraceServiceRequest") from None


def _encoded(message: Message, media: str) -> tuple[str, bytes]:
    """`message` as an answer of media type `media` (`answer_type`)."""
    if media == JSON:
        return JSON, json_format.MessageToJson(message, indent=None).encode()
    return media, message.SerializeToString()


def _http_status(exc: BaseException) -> int:
    code = status_code_for(exc)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        # Retry later (a quota, the server busy) or never as it is (too large a batch).
        return 429 if retry_after_seconds(exc) is not None else 413
    return _HTTP_STATUS.get(code, 500)


_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def refusal(exc: BaseException, media: str) -> Answer:
    """The answer to an Export that failed: the HTTP status OTLP/HTTP names for it, the
    `google.rpc.Status` the gRPC transport would send as the body, `Retry-After` when worth
    retrying. An unexpected error is logged here and answered 500 "internal error"."""
    status = _http_status(exc)
    if status == 500:
        log.error("OTLP/HTTP Export failed", exc_info=exc)
    content_type, body = _encoded(to_rpc_status(exc), media)
    headers: tuple[tuple[bytes, bytes], ...] = ()
    delay = retry_after_seconds(exc)
    if status in (429, 503) and delay is not None:
        headers = ((b"retry-after", str(max(1, math.ceil(delay))).encode()),)
    return Answer(status, content_type, body, headers)


def _sent_or_refusal(headers: Sequence[tuple[bytes, bytes]]) -> Sent | Answer:
    """`sent(headers)`, or the 400 refusing them: in binary protobuf, as a 415 is, since the
    request chose no media type to answer in."""
    try:
        return sent(headers)
    except InvalidArgumentError as err:
        return refusal(err, PROTOBUF)


def _metadata(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[str, str | bytes]]:
    """The request's headers as the metadata an Export reads its key from."""
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]


def _admitted(admit: Admit, headers: Sequence[tuple[bytes, bytes]]) -> Answer | None:
    """The refusal of a request by its headers alone (`Admit`), or None: a request without a
    valid key is answered 401 before anything of its body is inflated or parsed, as the gRPC
    port refuses it before it decodes a message (docs/connect.md, "OTLP traces in")."""
    how = _sent_or_refusal(headers)
    if isinstance(how, Answer):
        return how
    try:
        admit(_metadata(headers))
    except Exception as err:  # every error is answered; unexpected ones are logged (refusal)
        return refusal(err, answer_type(how.content_type))
    return None


def answer(
    export: Export,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    max_bytes: int,
) -> Answer:
    """The whole exchange of one POST to /v1/traces, without the HTTP server."""
    metadata = _metadata(headers)
    how = _sent_or_refusal(headers)
    if isinstance(how, Answer):
        return how
    media = answer_type(how.content_type)
    try:
        request = decode(body, how.content_type, how.content_encoding, max_bytes)
        response = export(request, metadata)
    except _UnsupportedError as err:
        # A `google.rpc.Status` body, as for every 4xx of an Export (OTLP/HTTP, "Failures").
        status = to_rpc_status(_invalid(err.header, str(err)))
        return Answer(415, *_encoded(status, media))
    except Exception as err:  # every error is answered; unexpected ones are logged (refusal)
        return refusal(err, media)
    content_type, payload = _encoded(response, media)
    return Answer(200, content_type, payload)


class OtlpHttpApp:
    """The ASGI application: only `POST /v1/traces`; a request `admit` refuses is answered
    before its body is inflated or parsed; bodies over `max_bytes` (before or after gzip) are
    refused 413 without being read whole. Exports run on a small thread pool."""

    def __init__(
        self,
        export: Export,
        admit: Admit,
        max_bytes: int,
        workers: int = _WORKERS,
        on_answer: Callable[[int], None] | None = None,
    ) -> None:
        self._export = export
        self._admit = admit
        self._max_bytes = max_bytes
        self._on_answer = on_answer
        self._pool = futures.ThreadPoolExecutor(workers, thread_name_prefix="pml-otlp-http")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    async def _answer(self, send: Send, result: Answer) -> None:
        if self._on_answer is not None:
            self._on_answer(result.status)
        await _send(send, result)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan events to answer (uvicorn runs with lifespan off)
        if scope["path"] != PATH:
            await self._answer(
                send, Answer(404, "text/plain; charset=utf-8", f"only {PATH}".encode())
            )
            return
        if scope["method"] != "POST":
            await self._answer(
                send,
                Answer(405, "text/plain; charset=utf-8", b"POST only", ((b"allow", b"POST"),)),
            )
            return
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        body = await read_body(receive, self._max_bytes)  # a body over it drained first
        if isinstance(body, Gone):
            return  # the client went away before its body ended: nothing to answer or take
        refused = _admitted(self._admit, headers)
        if refused is not None:
            await self._answer(send, refused)
            return
        if body is None:
            too_large = ResourceExhaustedError(
                f"the body is over {self._max_bytes} bytes: export in smaller batches"
            )
            media = answer_type(sent(headers).content_type)  # (`_admitted` read its headers)
            await self._answer(send, refusal(too_large, media))
            return
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(
            self._pool, answer, self._export, headers, body, self._max_bytes
        )
        await self._answer(send, result)


async def _send(send: Send, result: Answer) -> None:
    headers = [
        (b"content-type", result.content_type.encode()),
        (b"content-length", str(len(result.body)).encode()),
        *result.headers,
    ]
    await send({"type": "http.response.start", "status": result.status, "headers": headers})
    await send({"type": "http.response.body", "body": result.body})


@dataclass(frozen=True)
class Tls:
    cert: Path
    key: Path
    client_ca: Path | None = None


class OtlpHttpServer:
    """uvicorn serving `OtlpHttpApp` on `listen` ("host:port", port 0: any free port) in a
    thread of its own; `stop` lets requests in flight finish."""

    def __init__(
        self,
        export: Export,
        admit: Admit,
        listen: str,
        max_bytes: int,
        tls: Tls | None,
        on_answer: Callable[[int], None] | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        try:
            sock = listening_socket(host.strip("[]"), int(port))
        except (OSError, ValueError, OverflowError) as err:
            raise bind_error(listen, err, "the OTLP/HTTP address ") from None
        self.port: int = sock.getsockname()[1]
        self._app = OtlpHttpApp(export, admit, max_bytes, on_answer=on_answer)
        tls_options: dict[str, Any] = {}
        if tls is not None:
            tls_options = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
            if tls.client_ca is not None:
                tls_options |= {
                    "ssl_ca_certs": str(tls.client_ca),
                    "ssl_cert_reqs": ssl.CERT_REQUIRED,
                }
        config = listener_config(
            self._app,
            lifespan="off",
            access_log=False,
            limit_concurrency=_MAX_CONNECTIONS,
            timeout_graceful_shutdown=30,
            **tls_options,
        )
        try:
            config.load()  # a certificate that does not load fails the start, not the thread
        except (OSError, ValueError) as err:
            sock.close()
            self._app.close()
            raise OSError(f"OTLP/HTTP on {listen}: {err}") from None
        self._served = ServedInThread(config, sock, "pml-otlp-http")

    def start(self) -> None:
        self._served.start()

    def stop(self) -> None:
        self._served.stop()
        self._app.close()


__all__ = [
    "JSON",
    "PATH",
    "PROTOBUF",
    "PROTOBUF_REGISTERED",
    "OtlpHttpApp",
    "OtlpHttpServer",
    "Sent",
    "Tls",
    "answer",
    "answer_type",
    "decode",
    "media_type",
    "sent",
]
