"""Typed Python client for pml's gRPC API (the `pml` CLI and the server package use it).

    with PmlClient("127.0.0.1:50051", api_key=key) as pml:
        pml.record(make_record("Read JSON file", code, "typescript", tools=["read_file"]))
        for s in pml.suggest("Load JSON data").suggestions: ...

Errors come back as `PmlClientError` with the status code, the BadRequest field violations and,
when the server says waiting helps (a tenant quota, a server busy starting or stopping), the delay
from its `google.rpc.RetryInfo`.
"""

from __future__ import annotations

import numbers
import os
import socket
import ssl
import threading
import time
import unicodedata
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from pml_client._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_client.errors import (
    DEFAULT_RETRIES,
    DEFAULT_RETRY_SECONDS,
    ClientCertificateError,
    PmlClientError,
    TlsMismatchError,
    backoff_seconds,
    retry_wait,
    worth_retrying,
)

R = TypeVar("R")
ExecutionRecord = resources_pb2.ExecutionRecord
CaptureResult = resources_pb2.CaptureResult


# Records one StreamTraces message carries in `upload`: a message costs gRPC about 0.3 ms of
# CPU on each side on this project's 2-core machines, a dev-set record's own bytes a few
# microseconds; 16 a message takes that to a tenth. Bytes: well under gRPC's default 4 MiB
# message limit (a bigger record goes alone).
UPLOAD_BATCH = 16
UPLOAD_BATCH_BYTES = 1 << 20
# What a message costs inside a batch beyond its own bytes: its field tag and length prefix.
_BATCH_ENTRY_BYTES = 8


def batched_messages(
    messages: Iterator[pml_pb2.StreamTracesRequest],
    size: int,
    max_bytes: int = UPLOAD_BATCH_BYTES,
) -> Iterator[pml_pb2.StreamTracesRequest]:
    """`messages` grouped into batch messages of up to `size` messages and `max_bytes`
    (`UPLOAD_BATCH_BYTES`, or less under a server's smaller message limit); one that would not
    fit is sent alone, as is the last one of a group of one."""
    group: list[pml_pb2.StreamTracesRequest] = []
    group_bytes = 0

    def flush() -> Iterator[pml_pb2.StreamTracesRequest]:
        nonlocal group, group_bytes
        if len(group) == 1:
            yield group[0]
        elif group:
            yield pml_pb2.StreamTracesRequest(batch=group)
        group, group_bytes = [], 0

    for message in messages:
        size_of = message.ByteSize() + _BATCH_ENTRY_BYTES
        if group and group_bytes + size_of > max_bytes:
            yield from flush()
        group.append(message)
        group_bytes += size_of
        if len(group) >= size or group_bytes >= max_bytes:
            yield from flush()
    yield from flush()


def _refused_here(
    execution_id: str, code: grpc.StatusCode, field: str, description: str, message: str
) -> pml_pb2.StreamTracesResponse:
    """The acknowledgement of an execution the client refuses without sending it, shaped as
    the server's: a `google.rpc.Status` with a BadRequest naming `field`."""
    violation = error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
    details = any_pb2.Any()
    details.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    status = status_pb2.Status(code=code.value[0], message=message, details=[details])
    return pml_pb2.StreamTracesResponse(execution_id=execution_id, error=status)


# A record up to this size is sent without asking the server its message limit, so only a large
# record costs the one extra call (a server set to take less than this answers in gRPC's words).
_ASK_LIMIT_BYTES = 64 * 1024


def _too_big(execution_id: str, size: int, max_bytes: int) -> pml_pb2.StreamTracesResponse:
    return _refused_here(
        execution_id,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "record",
        f"{size} bytes as a message, over the server's limit of {max_bytes}",
        f"not sent: the record is {size} bytes as a message, over the server's "
        f"--max-message-bytes of {max_bytes}",
    )


def _in_flight(execution_id: str) -> pml_pb2.StreamTracesResponse:
    """The answer to an execution id sent again while its first execution is unacknowledged."""
    description = (
        "repeats an execution of this upload not yet acknowledged: not sent; give each "
        "execution its own id (upload: each record its own request_id)"
    )
    return _refused_here(
        execution_id,
        grpc.StatusCode.INVALID_ARGUMENT,
        "execution_id",
        description,
        f"execution_id {execution_id!r} {description}",
    )


def _refused(name: str, description: str) -> PmlClientError:
    """A bad argument, refused before any call as the server refuses a bad field:
    INVALID_ARGUMENT with a BadRequest violation naming it."""
    return PmlClientError(
        grpc.StatusCode.INVALID_ARGUMENT, f"{name} {description}", [(name, description)]
    )


def _kind(value: object) -> str:
    return "None" if value is None else type(value).__name__


def text_problem(text: str) -> str | None:
    """Why `text` cannot be sent as text, or None. pml's text travels as UTF-8, and a surrogate
    code point has none: Python reads a command-line byte that is not UTF-8 as one (0xff as
    U+DCFF, `os.fsdecode`), and a JSON `\\ud800` escape as another. Protobuf raised
    UnicodeEncodeError then, a traceback naming no argument. The one check, for the client's
    arguments (`_text`) and the `pml` command line's (`pml_server/cli`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        char = text[err.start]
        # the byte a command line gave (surrogateescape), else the code point
        shown = (
            repr(char.encode("utf-8", "surrogateescape"))
            if "\udc80" <= char <= "\udcff"
            else f"U+{ord(char):04X}"
        )
        return (
            f"holds {shown} at position {err.start}: not UTF-8 text (a byte of another "
            "encoding, or a lone surrogate)"
        )
    return None


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise _refused(name, f"is {_kind(value)}, not a str")
    if not value.isascii() and (problem := text_problem(value)) is not None:
        raise _refused(name, problem)
    return value


def _texts(name: str, value: object) -> list[str]:
    """A sequence of strings. A lone string was taken as one: tags="io" sent the tags "i" and
    "o", tools="read_file" recorded nine tool calls."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _refused(name, f"is {_kind(value)}, not a sequence of str (one: [{value!r}])")
    items = list(value)
    for i, item in enumerate(items):
        _text(f"{name}[{i}]", item)
    return items


def _count(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _refused(name, f"is {value!r}: an int from {minimum}")
    return value


# A request field's type only: its range is the server's to check (one place).
def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refused(name, f"is {_kind(value)} {value!r}, not an int")
    return value


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's too
        raise _refused(name, f"is {_kind(value)} {value!r}, not a number")
    return float(value)


def _numbers(name: str, value: object) -> list[float]:
    """A sequence of numbers (an embedding)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _refused(name, f"is {_kind(value)}, not a sequence of numbers")
    return [_number(f"{name}[{i}]", item) for i, item in enumerate(value)]


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _refused(name, f"is {_kind(value)} {value!r}: True or False")
    return value


def _path(name: str, value: object) -> Path | None:
    if value is None or isinstance(value, Path):
        return value
    if isinstance(value, str) and value:
        return Path(value)
    if isinstance(value, os.PathLike):
        return Path(value)
    raise _refused(name, f"is {_kind(value)} {value!r}: a file path")


def make_record(
    intent: str,
    code: str,
    language: str = "typescript",
    tools: Sequence[str] = (),
    failed_tools: Sequence[tuple[str, str]] = (),
    request_id: str = "",
    duration_ms: float = 0.0,
    arguments_json: str = "{}",
    session_id: str = "",
) -> ExecutionRecord:
    """A record whose tool calls are `tools` (succeeded) then `failed_tools` (name, error).
    Without `request_id` a fresh UUID is used (retry with the same record to stay idempotent).
    `session_id`: the agent session it belongs to (the server learns which step follows which)."""
    _text("arguments_json", arguments_json)
    calls = [
        resources_pb2.ToolCall(tool=t, ok=True, arguments_json=arguments_json)
        for t in _texts("tools", tools)
    ]
    if isinstance(failed_tools, (str, bytes)) or not isinstance(failed_tools, Iterable):
        raise _refused("failed_tools", f"is {_kind(failed_tools)}, not (tool, error) pairs")
    for i, pair in enumerate(failed_tools := list(failed_tools)):
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise _refused(f"failed_tools[{i}]", f"is {pair!r}, not a (tool, error) pair")
        _texts(f"failed_tools[{i}]", pair)
    calls += [resources_pb2.ToolCall(tool=t, ok=False, error=e) for t, e in failed_tools]
    return ExecutionRecord(
        request_id=_text("request_id", request_id) or str(uuid.uuid4()),
        intent=_text("intent", intent),
        code=_text("code", code),  # None made a record without code
        language=_text("language", language),
        tool_calls=calls,
        duration_ms=_number("duration_ms", duration_ms),
        session_id=_text("session_id", session_id),
    )


_MAX_KEY_CHARS = 1024
# The longest timeout, the Node client's too (docs/api.md, Deadlines and retries): from about
# 1e10 s gRPC's deadline overflows and every call failed DEADLINE_EXCEEDED at once.
MAX_TIMEOUT_SECONDS = 2_147_483.647


def _header_key(api_key: str) -> str:
    """`api_key` as it can travel in the `authorization` header: without the whitespace around
    it (a key read from a file keeps its newline), and only printable ASCII. Any other
    character made every call fail INTERNAL "Invalid metadata" (a control character) or raise
    UnicodeEncodeError from inside grpc (a byte that is not UTF-8 in a command-line argument).
    So is a key longer than `_MAX_KEY_CHARS` (`pml keys add` prints 47 characters): past gRPC's
    metadata limit (8 KiB) every call would fail on the header, not on the key. Either is refused
    before any call, INVALID_ARGUMENT naming `api_key` (a PmlClientError, as every other
    refusal), without the key itself (a secret)."""
    key = api_key.strip()
    bad = next((ch for ch in key if not " " <= ch <= "~"), None)
    description = None
    if bad is not None:
        description = (
            f"holds {bad.encode('utf-8', 'backslashreplace')!r} at position {key.index(bad)}: "
            "a key is printable ASCII (as `pml keys add` prints it)"
        )
    elif len(key) > _MAX_KEY_CHARS:
        description = (
            f"is {len(key)} characters; a key is at most {_MAX_KEY_CHARS} "
            "(`pml keys add` prints 47)"
        )
    if description is not None:
        raise PmlClientError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"api_key {description}",
            [("api_key", description)],
        )
    return key


class _Silence:
    """Cancels a stream once the server has said nothing for `seconds` while `waiting()` (an
    execution sent and not answered): a server that stops answering (a frozen process, a
    connection dead without a reset) held an upload or a `stream()` for ever, streams having
    no deadline (docs/api.md, Deadlines and retries). `heard()` restarts the count: on each
    message, and when an execution is sent while none was waiting."""

    def __init__(self, seconds: float, waiting: Callable[[], bool]) -> None:
        self.seconds = seconds
        self.fired = False
        self._waiting = waiting
        self._last = time.monotonic()
        self._done = threading.Event()

    def heard(self) -> None:
        self._last = time.monotonic()

    def watch(self, call: grpc.Future) -> None:
        done = self._done = threading.Event()  # this stream's: `stop` ends its watch alone

        def run() -> None:
            while not done.wait(min(self.seconds / 4, 1.0)):
                if self._waiting() and time.monotonic() - self._last >= self.seconds:
                    self.fired = True
                    call.cancel()
                    return

        self.fired = False
        self.heard()
        threading.Thread(target=run, name="pml-stream-silence", daemon=True).start()

    def stop(self) -> None:
        self._done.set()


@dataclass
class UploadReport:
    """What `upload` achieved: one acknowledgement per execution id, and how often it
    reconnected."""

    acks: dict[str, pml_pb2.StreamTracesResponse] = field(default_factory=dict)
    reconnects: int = 0


_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
# PKCS#8, and the RSA and EC forms OpenSSL writes.
_PEM_KEYS = tuple(f"-----BEGIN {kind}PRIVATE KEY-----".encode() for kind in ("", "RSA ", "EC "))


def _tls_files(
    root_certificates: Path | None, client_cert: Path | None, client_key: Path | None
) -> dict[str, bytes | None]:
    """The TLS files read and checked before gRPC sees them. A certificate without its key
    aborted the process (a failed check inside gRPC: SIGABRT); a key without its certificate
    was ignored; a file with no PEM certificate (or key) failed every call UNAVAILABLE
    "Failed to create security handshaker", as if no server answered. Each is refused
    INVALID_ARGUMENT naming the parameter (an unreadable file raises OSError, naming it)."""
    if (client_cert is None) != (client_key is None):
        given, missing = (
            ("client_cert", "client_key") if client_key is None else ("client_key", "client_cert")
        )
        raise PmlClientError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{given} needs {missing}: mutual TLS takes both",
            [(given, f"needs {missing}: mutual TLS takes both")],
        )
    read: dict[str, bytes | None] = {}
    for name, path, markers, what in (
        ("root_certificates", root_certificates, (_PEM_CERTIFICATE,), "certificate"),
        ("client_cert", client_cert, (_PEM_CERTIFICATE,), "certificate"),
        ("client_key", client_key, _PEM_KEYS, "private key"),
    ):
        data = path.read_bytes() if path is not None else None
        if path is not None and data is not None and not any(m in data for m in markers):
            raise PmlClientError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{name} {path}: no PEM {what} in it",
                [(name, f"{path}: no PEM {what} in it")],
            )
        read[name] = data
    return {
        "root_certificates": read["root_certificates"],
        "certificate_chain": read["client_cert"],
        "private_key": read["client_key"],
    }


def _host_port(target: str) -> tuple[str, int] | None:
    """`target`'s host and port (`host:port`, `[v6]:port`, `dns:///host:port`), or None for
    any other form (a unix socket, no port)."""
    rest = target.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host or "/" in host:
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def _target_problem(target: str) -> str | None:
    """Why `target` cannot be dialled, None when it may be: a space or a control character in
    it, a URL's scheme, a port out of range. Each was dialled, and every call retried as of a
    server down (a port past 65535 dialled another: 99999 is 34463). The Go and Node clients'
    rule (`targetProblem`)."""
    if any(ch.isspace() or unicodedata.category(ch) == "Cc" for ch in target):
        return "holds a space or a control character"
    if target.lower().startswith(("http://", "https://")):
        return "is a URL (TLS is tls=True)"
    rest = target.removeprefix("dns:///")
    _, sep, port = rest.rpartition(":")
    if sep and port.isascii() and port.isdigit() and not 1 <= int(port) <= 65535:
        return f"has the port {int(port)}: a port is 1 to 65535"
    return None


# The longest a handshake of `_asks_for_client_certificate` may take.
_ASK_HANDSHAKE_SECONDS = 5.0


def _asks_for_client_certificate(target: str, seconds: float) -> bool:
    """Whether the TLS server at `target` refuses a client for want of a certificate: in a
    handshake of this client's own (`_handshake`) the server asks for one (a
    CertificateRequest) and then closes the connection without a byte. A server that takes the
    client answers HTTP/2's SETTINGS."""
    seen = _handshake(target, seconds)
    return seen is not None and seen.asked and not seen.answered


def _speaks_tls(target: str, seconds: float) -> bool:
    """Whether the server at `target` completes a TLS handshake of this client's own
    (`_handshake`): a client in plaintext then met a TLS server."""
    seen = _handshake(target, seconds)
    return seen is not None and seen.completed


@dataclass(frozen=True)
class _Handshake:
    completed: bool  # the handshake finished
    asked: bool  # the server asked for a client certificate
    answered: bool  # the server sent a byte after it


def _handshake(target: str, seconds: float) -> _Handshake | None:
    """A TLS handshake of this client's own with `target` (the server's certificate not
    checked: nothing is sent over it), then one byte read; None when no connection was made
    (the server is down, `target` is no host:port)."""
    address = _host_port(target)
    if address is None or seconds <= 0:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    asked: list[bool] = []

    def seen(
        _conn: object,
        direction: str,
        _version: object,
        _kind: object,
        message: object,
        _data: object,
    ) -> None:
        if direction == "read" and message == _CERTIFICATE_REQUEST:
            asked.append(True)

    setattr(context, "_msg_callback", seen)  # noqa: B010  (CPython's, not typed)
    completed = False
    try:
        with socket.create_connection(address, timeout=seconds) as raw:
            try:
                with context.wrap_socket(raw, server_hostname=address[0]) as tls:
                    completed = True
                    answered = tls.recv(1)
            except (ssl.SSLEOFError, ConnectionResetError):
                answered = b""
            except ssl.SSLError:  # no TLS server: what it sent is no TLS record
                return _Handshake(completed=False, asked=False, answered=False)
    except OSError:
        return None
    return _Handshake(completed=completed, asked=bool(asked), answered=bool(answered))


# TLS's handshake message type of a CertificateRequest.
_CERTIFICATE_REQUEST = 13


# gRPC backs off a channel's reconnects from 1 s by 1.6 up to 120 s, and while it waits every
# call fails at once with the last connect error: a call retrying through a server restart
# kept failing for seconds after the server was back, and past its retry budget. The channel
# reconnects from 0.1 s, at least once a second (docs/api.md, Deadlines and retries).
_RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


class PmlClient:
    def __init__(
        self,
        target: str,
        api_key: str | None = None,
        *,
        root_certificates: Path | None = None,
        client_cert: Path | None = None,
        client_key: Path | None = None,
        tls: bool = False,
        timeout: float = 30.0,
        retries: int | None = DEFAULT_RETRIES,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        # Checked before a channel exists (a bad argument leaves nothing to close), naming the
        # argument: a target that is no str raised AttributeError from grpc, an empty one
        # UNKNOWN "the target uri is not valid"; a timeout of 0, below or NaN failed every call
        # DEADLINE_EXCEEDED, of text TypeError at the first call; retries of text TypeError at
        # the first failure; an api_key or a TLS file path that is no str AttributeError.
        if not _text("target", target).strip():
            raise _refused("target", 'is empty: give "host:port"')
        target = target.strip()  # a target read from a file keeps its newline
        if (problem := _target_problem(target)) is not None:
            raise _refused("target", f'{problem}: give "host:port"')
        if api_key is not None:
            _text("api_key", api_key)
        self._metadata = (("authorization", f"Bearer {_header_key(api_key)}"),) if api_key else ()
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not (0 < timeout <= MAX_TIMEOUT_SECONDS)
        ):
            raise _refused(
                "timeout",
                f"is {timeout!r}: a number of seconds above 0, at most {MAX_TIMEOUT_SECONDS} "
                "(24.8 days)",
            )
        if retries is not None:
            _count("retries", retries)
        if (
            isinstance(retry_seconds, bool)
            or not isinstance(retry_seconds, int | float)
            or not (0 <= retry_seconds <= MAX_TIMEOUT_SECONDS)
        ):
            raise _refused(
                "retry_seconds",
                f"is {retry_seconds!r}: a number of seconds from 0 (0: no retries), at most "
                f"{MAX_TIMEOUT_SECONDS}",
            )
        if not isinstance(tls, bool):
            raise _refused("tls", f"is {tls!r}: True or False")
        root_certificates = _path("root_certificates", root_certificates)
        client_cert = _path("client_cert", client_cert)
        client_key = _path("client_key", client_key)
        options = [
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            *_RECONNECT_OPTIONS,
        ]
        if tls or root_certificates or client_cert or client_key:
            creds = grpc.ssl_channel_credentials(
                **_tls_files(root_certificates, client_cert, client_key)
            )
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pml_pb2_grpc.PmlServiceStub(self._channel)
        self._timeout = timeout
        self._retries = retries
        self._retry_seconds = float(retry_seconds)
        # a connection closed at once is asked about (`_failure`): over TLS without a client
        # certificate, a server may ask for one; in plaintext, the server may speak TLS
        self._tls_mode = (
            "mutual" if client_cert else "tls" if tls or root_certificates else "plaintext"
        )
        self._target = target
        self._stream_limits: tuple[int, int] | None = None  # `_server_stream_limits`, once known
        self._closed = False

    def close(self) -> None:
        """Closes the channel; once more does nothing. Every later call raises `_open`'s
        error."""
        self._closed = True
        self._channel.close()

    def _open(self) -> None:
        """Raises, once `close` was called, PmlClientError CANCELLED "the client is closed"
        (the code Go's gRPC gives a call on a closed connection): grpc raised ValueError
        "Cannot invoke RPC on closed channel!", which no `except PmlClientError` caught."""
        if self._closed:
            raise PmlClientError(
                grpc.StatusCode.CANCELLED,
                "the client is closed (close() was called): nothing was sent",
            )

    def _failure(self, err: grpc.RpcError, seconds: float) -> PmlClientError:
        """`err` as a PmlClientError; UNAVAILABLE "Socket closed" over TLS without a client
        certificate, from a server that asks for one (a handshake of the client's own, within
        `seconds`), as ClientCertificateError (docs/api.md, Deadlines and retries)."""
        failure = PmlClientError.from_rpc_error(err)
        if (
            failure.code is not grpc.StatusCode.UNAVAILABLE
            or "Socket closed" not in failure.message
        ):
            return failure
        seconds = min(seconds, _ASK_HANDSHAKE_SECONDS)
        if self._tls_mode == "tls" and _asks_for_client_certificate(self._target, seconds):
            return ClientCertificateError(failure.message)
        if self._tls_mode == "plaintext" and _speaks_tls(self._target, seconds):
            return TlsMismatchError(failure.message, server_speaks_tls=True)
        return failure

    def __enter__(self) -> PmlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: Callable[..., Any],
        request: Any,
        reply_type: type[R],
        *,
        safe: bool = True,
        deadline: float | None = None,
    ) -> R:
        """One unary call. A call `safe` to repeat (a read, or a record whose request id makes
        a resend apply once) is retried on UNAVAILABLE and on RESOURCE_EXHAUSTED with the
        server's RetryInfo (`worth_retrying`: a quota, not a size limit) for `retry_seconds`
        after its first failure (at most `retries` times, when given), after `retry_wait` (the
        backoff, never sooner than that RetryInfo); any other failure, or the last one, raises
        PmlClientError. `timeout` bounds the whole call, retries included (docs/api.md,
        Deadlines and retries): each attempt's deadline is what remains of it, and a retry
        whose wait would outlast it is not made (the last failure raises). `deadline`
        (`time.monotonic()`): the deadline of a call this one is part of (`record`'s limit
        probe spends from the record's)."""
        self._open()
        if deadline is None:
            deadline = time.monotonic() + self._timeout
        attempt = 0
        retry_until: float | None = None  # the retry budget's end, from the first failure
        while True:
            try:
                remaining = deadline - time.monotonic()
                if remaining <= 0:  # spent before this attempt (gRPC would wait to say so)
                    raise PmlClientError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no time left of the call's timeout of {self._timeout} s",
                    )
                reply = method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as err:
                failure = self._failure(err, deadline - time.monotonic())
                if not (safe and worth_retrying(failure)) or attempt == self._retries:
                    raise failure from None
                now = time.monotonic()
                if retry_until is None:
                    retry_until = now + self._retry_seconds
                wait = retry_wait(attempt, failure.retry_delay_seconds, now, retry_until, deadline)
                if wait is None:
                    raise failure from None
                time.sleep(wait)
                attempt += 1
                continue
            assert isinstance(reply, reply_type)
            return reply

    # ---- unary calls ---------------------------------------------------------------------------

    def _server_stream_limits(
        self, deadline: float | None = None, *, retry: bool = True
    ) -> tuple[int, int]:
        """How many messages the server takes in one batch (1: none, as a server older than
        batches answers) and its largest request message in bytes (0: not said), asked once
        per client (within `deadline`, that of the call asking; without retries when not
        `retry`: an upload, whose reconnects are its retries); unknown (1, 0 this time) if
        the ask fails."""
        if self._stream_limits is None:
            try:
                info = self._call(
                    self._stub.GetServerInfo,
                    pml_pb2.GetServerInfoRequest(),
                    pml_pb2.GetServerInfoResponse,
                    safe=retry,
                    deadline=deadline,
                )
            except PmlClientError:
                return 1, 0  # the upload meets the same error and retries; ask again then
            self._stream_limits = (max(1, info.stream_batch_limit), info.max_message_bytes)
        return self._stream_limits

    def server_info(self) -> pml_pb2.GetServerInfoResponse:
        return self._call(
            self._stub.GetServerInfo, pml_pb2.GetServerInfoRequest(), pml_pb2.GetServerInfoResponse
        )

    def record(self, record: ExecutionRecord) -> CaptureResult:
        """A record over the server's message limit is not sent: PmlClientError
        RESOURCE_EXHAUSTED naming `record`, its size and the limit, as `upload` answers for it
        (the call answered only gRPC's "Received message larger than max"). The server is
        asked its limit once, and only for a record of more than `_ASK_LIMIT_BYTES`, within
        the call's timeout (docs/api.md, Deadlines and retries)."""
        if not isinstance(record, ExecutionRecord):
            raise _refused("record", f"is {_kind(record)}, not an ExecutionRecord (make_record)")
        deadline = time.monotonic() + self._timeout
        request = pml_pb2.RecordExecutionRequest(record=record)
        size = request.ByteSize()
        if size > _ASK_LIMIT_BYTES:
            _, max_bytes = self._server_stream_limits(deadline)
            if max_bytes and size > max_bytes:
                refused = _too_big(record.request_id, size, max_bytes).error
                raise PmlClientError.from_status(refused)
        reply = self._call(
            self._stub.RecordExecution,
            request,
            pml_pb2.RecordExecutionResponse,
            safe=bool(record.request_id),  # the request id makes a resend apply once
            deadline=deadline,
        )
        return reply.result

    def suggest(
        self,
        intent: str,
        k: int = 0,
        *,
        min_match: float | None = None,
        min_success: float | None = None,
        available_tools: Sequence[str] | None = None,
        tags: Sequence[str] = (),
        include_flagged: bool = False,
        explain: bool = False,
        intent_embedding: Sequence[float] = (),
        plan_size: int | None = None,
        session_id: str = "",
        previous_patterns: Sequence[str] = (),
        previous_tools: Sequence[str] = (),
    ) -> pml_pb2.SuggestResponse:
        """`plan_size`: most plans (None: the server's default, 3; 0: none). `session_id`,
        `previous_patterns`, `previous_tools`: what the agent just did (`SuggestContext`); with
        one of them `intent` may be empty: the capabilities that usually come next."""
        request = pml_pb2.SuggestRequest(
            intent=_text("intent", intent),
            page_size=_int("k", k),
            tags=_texts("tags", tags),
            include_flagged=_flag("include_flagged", include_flagged),
            explain=_flag("explain", explain),
            intent_embedding=_numbers("intent_embedding", intent_embedding),
        )
        if min_match is not None:
            request.min_match = _number("min_match", min_match)
        if min_success is not None:
            request.min_success = _number("min_success", min_success)
        if available_tools is not None:
            request.available_tools.tools.extend(_texts("available_tools", available_tools))
        if plan_size is not None:
            request.plan_size = _int("plan_size", plan_size)
        if session_id or previous_patterns or previous_tools:
            request.context.session_id = _text("session_id", session_id)
            request.context.previous_patterns.extend(_texts("previous_patterns", previous_patterns))
            request.context.previous_tools.extend(_texts("previous_tools", previous_tools))
        return self._call(self._stub.Suggest, request, pml_pb2.SuggestResponse)

    def get_pattern(self, name: str) -> resources_pb2.Pattern:
        return self._call(
            self._stub.GetPattern,
            pml_pb2.GetPatternRequest(name=_text("name", name)),
            pml_pb2.GetPatternResponse,
        ).pattern

    def get_capability(self, name: str) -> resources_pb2.Capability:
        reply = self._call(
            self._stub.GetCapability,
            pml_pb2.GetCapabilityRequest(name=_text("name", name)),
            pml_pb2.GetCapabilityResponse,
        )
        return reply.capability

    def list_patterns(
        self, page_size: int = 0, page_token: str = "", capability: str = ""
    ) -> pml_pb2.ListPatternsResponse:
        """One page of patterns by id: the tenant's, or with `capability`
        (`capabilities/{id}`) only its members (`get_capability` names at most 100)."""
        request = pml_pb2.ListPatternsRequest(
            page_size=_int("page_size", page_size),
            page_token=_text("page_token", page_token),
            capability=_text("capability", capability),
        )
        return self._call(self._stub.ListPatterns, request, pml_pb2.ListPatternsResponse)

    def list_pattern_intents(
        self, pattern: str, page_size: int = 0, page_token: str = ""
    ) -> pml_pb2.ListPatternIntentsResponse:
        """One page of a pattern's intents (`patterns/{id}`), oldest first; `get_pattern`
        holds only those that fit its answer."""
        request = pml_pb2.ListPatternIntentsRequest(
            parent=_text("pattern", pattern),
            page_size=_int("page_size", page_size),
            page_token=_text("page_token", page_token),
        )
        return self._call(
            self._stub.ListPatternIntents, request, pml_pb2.ListPatternIntentsResponse
        )

    def list_capabilities(
        self, page_size: int = 0, page_token: str = ""
    ) -> pml_pb2.ListCapabilitiesResponse:
        request = pml_pb2.ListCapabilitiesRequest(
            page_size=_int("page_size", page_size), page_token=_text("page_token", page_token)
        )
        return self._call(self._stub.ListCapabilities, request, pml_pb2.ListCapabilitiesResponse)

    def list_failures(
        self, page_size: int = 0, page_token: str = ""
    ) -> pml_pb2.ListFailuresResponse:
        request = pml_pb2.ListFailuresRequest(
            page_size=_int("page_size", page_size), page_token=_text("page_token", page_token)
        )
        return self._call(self._stub.ListFailures, request, pml_pb2.ListFailuresResponse)

    def iter_patterns(
        self, page_size: int = 100, capability: str = ""
    ) -> Iterator[resources_pb2.Pattern]:
        token = ""
        while True:
            page = self.list_patterns(page_size, token, capability)
            yield from page.patterns
            token = page.next_page_token
            if not token:
                return

    def iter_pattern_intents(
        self, pattern: str, page_size: int = 1000
    ) -> Iterator[resources_pb2.Intent]:
        token = ""
        while True:
            page = self.list_pattern_intents(pattern, page_size, token)
            yield from page.intents
            token = page.next_page_token
            if not token:
                return

    def iter_capabilities(self, page_size: int = 100) -> Iterator[resources_pb2.Capability]:
        token = ""
        while True:
            page = self.list_capabilities(page_size, token)
            yield from page.capabilities
            token = page.next_page_token
            if not token:
                return

    def delete_pattern(self, name: str) -> None:
        self._call(
            self._stub.DeletePattern,
            pml_pb2.DeletePatternRequest(name=_text("name", name)),
            pml_pb2.DeletePatternResponse,
            safe=False,  # a resend after a lost reply would answer NOT_FOUND
        )

    def delete_capability(self, name: str) -> None:
        self._call(
            self._stub.DeleteCapability,
            pml_pb2.DeleteCapabilityRequest(name=_text("name", name)),
            pml_pb2.DeleteCapabilityResponse,
            safe=False,
        )

    def run_retention(self, apply: bool = False) -> pml_pb2.RunRetentionResponse:
        return self._call(
            self._stub.RunRetention,
            pml_pb2.RunRetentionRequest(apply=_flag("apply", apply)),
            pml_pb2.RunRetentionResponse,
            safe=not apply,  # a dry run only reads
        )

    def stats(self) -> pml_pb2.GetStatsResponse:
        return self._call(self._stub.GetStats, pml_pb2.GetStatsRequest(), pml_pb2.GetStatsResponse)

    # ---- streaming -----------------------------------------------------------------------------

    def stream(
        self, requests: Iterable[pml_pb2.StreamTracesRequest]
    ) -> Iterator[pml_pb2.StreamTracesResponse]:
        """Raw StreamTraces: send `requests`, yield acknowledgements as they come (those the
        server batched one by one). An exception from `requests` ends the sending; once the
        acknowledgements of what was sent are yielded, it is raised as itself (gRPC, iterating
        them in its own thread, would only say UNKNOWN "Exception iterating requests!").

        The stream is cancelled once the server has said nothing for `timeout` while an
        execution it was sent complete (a `record`, a `finished`) waits for its
        acknowledgement: DEADLINE_EXCEEDED, as `upload`'s (docs/api.md, Deadlines and
        retries); a live execution left open waits for nothing, and the time the caller holds
        an acknowledgement is not the server's silence."""
        self._open()
        failed: list[Exception] = []
        waiting: set[str] = set()  # completed executions sent, not acknowledged
        holding = threading.Event()  # the caller has an acknowledgement in hand
        silence = _Silence(self._timeout, lambda: bool(waiting) and not holding.is_set())

        def sent() -> Iterator[pml_pb2.StreamTracesRequest]:
            try:
                for message in requests:
                    if isinstance(message, pml_pb2.StreamTracesRequest):
                        for one in message.batch or (message,):
                            if one.WhichOneof("event") in ("record", "finished"):
                                if not waiting:
                                    silence.heard()  # the first waiting since the last answer
                                waiting.add(one.execution_id)
                    yield message
            except Exception as err:
                failed.append(err)

        call = self._stub.StreamTraces(sent(), metadata=self._metadata)
        silence.watch(call)
        try:
            for message in call:
                silence.heard()
                for ack in message.batch or (message,):
                    waiting.discard(ack.execution_id)
                    holding.set()
                    yield ack
                    holding.clear()
                    silence.heard()
        except grpc.RpcError as err:
            if silence.fired:  # cancelled here: say why
                raise PmlClientError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no answer from the server within {silence.seconds} s "
                    f"({len(waiting)} executions waiting)",
                ) from None
            failure = self._failure(err, self._timeout)
            if waiting and type(failure) is PmlClientError:
                # "Stream removed (Socket closed)" said nothing of what the caller may resend
                failure = PmlClientError(
                    failure.code,
                    f"{failure.message}: the stream broke with {len(waiting)} executions sent "
                    "and not acknowledged (each may have been captured or not: send them again "
                    "under the same request ids, which apply once; `upload` does)",
                    failure.violations,
                    failure.retry_delay_seconds,
                )
            raise failure from None
        finally:
            silence.stop()
            call.cancel()  # a no-op once ended; a caller that stops iterating ends the stream
        if failed:
            raise failed[0]

    def upload(
        self,
        records: Iterable[ExecutionRecord],
        *,
        max_reconnects: int = 8,
        on_ack: Callable[[pml_pb2.StreamTracesResponse], None] | None = None,
        batch: int = UPLOAD_BATCH,
    ) -> UploadReport:
        """Upload whole records over StreamTraces. If the stream breaks, reconnect and resend
        every record not yet acknowledged, or acknowledged with an error that waiting may
        cure (`worth_retrying`: not captured); request ids (default: a UUID per record) make
        the resend apply exactly once. `records` is consumed lazily (a big file is never held
        whole): only the records sent and not yet acknowledged are kept.

        Up to `batch` records go in one message (`StreamTracesRequest.batch`, within
        `UPLOAD_BATCH_BYTES`): a message costs gRPC far more than its record does. A batch is
        sent once full, so for a source whose records trickle in (each should reach the
        server as soon as it exists) pass `batch=1`."""
        # A record without a request id gets a fresh one, kept across reconnects of this upload
        # (a fixed default such as its index would collide with other uploads).
        if isinstance(records, (str, bytes)) or not isinstance(records, Iterable):
            raise _refused("records", f"is {_kind(records)}, not ExecutionRecords")

        def pairs() -> Iterator[tuple[str, ExecutionRecord]]:
            for i, r in enumerate(records):
                if not isinstance(r, ExecutionRecord):  # raised once what was sent is answered
                    raise _refused(f"records[{i}]", f"is {_kind(r)}, not an ExecutionRecord")
                yield r.request_id or str(uuid.uuid4()), r

        return self.upload_pairs(
            pairs(),
            max_reconnects=max_reconnects,
            on_ack=on_ack,
            batch=batch,
        )

    def upload_pairs(
        self,
        items: Iterable[tuple[str, ExecutionRecord]],
        *,
        max_reconnects: int = 5,
        on_ack: Callable[[pml_pb2.StreamTracesResponse], None] | None = None,
        keep_acks: bool = True,
        batch: int = UPLOAD_BATCH,
    ) -> UploadReport:
        """`upload` of (execution id, record) pairs; execution ids must be unique (one repeated
        while its first execution is unacknowledged is not sent: it is answered here,
        INVALID_ARGUMENT naming `execution_id`, and `report.acks` keeps that error). `on_ack`
        is called once per execution id, whatever the reconnects (once more for a repeated
        one); `keep_acks=False` leaves `report.acks` empty (a big file's acks need not all be
        held)."""
        _count("batch", batch, 1)
        _count("max_reconnects", max_reconnects)
        _flag("keep_acks", keep_acks)
        if on_ack is not None and not callable(on_ack):
            # called at the first acknowledgement, once records were captured: TypeError then
            raise _refused("on_ack", f"is {_kind(on_ack)}, not a callable (or None)")
        self._open()
        report = UploadReport()
        source = iter(items)
        unacked: dict[str, ExecutionRecord] = {}  # sent, not acknowledged (insertion order)
        # Records too big for the server's message limit, answered here and never sent:
        # filled by gRPC's request thread, emptied by this one (a deque is safe for that).
        held_back: deque[pml_pb2.StreamTracesResponse] = deque()
        sequence = 0
        exhausted = False
        # What the caller's `items` raised (in gRPC's request thread, which would only say
        # UNKNOWN "Exception iterating requests!"): the stream is closed there, what was sent
        # is acknowledged, then the very exception is raised to the caller.
        source_failed: list[Exception] = []
        # Executions the server acknowledged with an error that waiting may cure (`worth_
        # retrying`: UNAVAILABLE while its index catches up after a start, a quota): not
        # captured, so they stay unacknowledged and the next stream resends them. Each one's
        # error is kept: it is the answer if the reconnects run out.
        resend: dict[str, tuple[PmlClientError, pml_pb2.StreamTracesResponse]] = {}
        # sent on this stream, not answered yet (those in `resend` wait for the next one)
        silence = _Silence(self._timeout, lambda: len(unacked) > len(resend))

        def from_source() -> Iterator[tuple[str, ExecutionRecord]]:
            # `next` by hand, not `yield from`: a stream that breaks leaves this generator to
            # be closed, and `yield from` would close `source` with it (the rest of the
            # caller's records then never sent, the upload ending as if they were all done).
            while True:
                try:
                    item = next(source)
                except StopIteration:
                    return
                except Exception as err:
                    source_failed.append(err)
                    return
                yield item

        def messages(max_bytes: int) -> Iterator[pml_pb2.StreamTracesRequest]:
            nonlocal sequence, exhausted
            for eid, record in list(unacked.items()):  # a reconnect resends these first
                sequence += 1
                yield pml_pb2.StreamTracesRequest(
                    execution_id=eid, sequence=sequence, record=record
                )
            for eid, record in from_source():
                if eid in unacked:
                    # Sent under an id still waiting for its ack, it would replace the first in
                    # `unacked`: one ack would answer both and the other's (an ALREADY_EXISTS
                    # from the server) be dropped as a repeat, the record lost with no error.
                    held_back.append(_in_flight(eid))
                    continue
                message = pml_pb2.StreamTracesRequest(
                    execution_id=eid, sequence=sequence + 1, record=record
                )
                if max_bytes and message.ByteSize() > max_bytes:
                    # Sent, it would end the whole stream in RESOURCE_EXHAUSTED (and every
                    # reconnect would send it again): refused alone, as the server refuses a
                    # record it cannot take.
                    held_back.append(_too_big(eid, message.ByteSize(), max_bytes))
                    continue
                if len(unacked) <= len(resend):
                    silence.heard()  # the first execution waiting since the last answer
                unacked[eid] = record
                sequence += 1
                yield message
            exhausted = not source_failed

        def requests() -> Iterator[pml_pb2.StreamTracesRequest]:
            # Not retried: each reconnect of an upload to a server down spent a whole retry
            # budget (5 s) here before its stream (docs/api.md, Deadlines and retries).
            batch_limit, max_bytes = self._server_stream_limits(retry=False)
            per_message = min(batch, batch_limit) if batch > 1 else 1
            if per_message == 1:
                return messages(max_bytes)
            budget = min(UPLOAD_BATCH_BYTES, max_bytes) if max_bytes else UPLOAD_BATCH_BYTES
            return batched_messages(messages(max_bytes), per_message, budget)

        def answer(ack: pml_pb2.StreamTracesResponse) -> None:
            if keep_acks:
                # An id answered twice (a repeated execution id): its error is the one kept.
                earlier = report.acks.get(ack.execution_id)
                if earlier is None or not earlier.HasField("error"):
                    report.acks[ack.execution_id] = ack
            if on_ack is not None:
                on_ack(ack)

        def answer_held_back() -> None:
            while held_back:
                answer(held_back.popleft())

        while True:
            try:
                self._open()  # closed during the upload: not one more stream
                call = self._stub.StreamTraces(requests(), metadata=self._metadata)
                silence.watch(call)
                for message in call:
                    silence.heard()
                    answer_held_back()
                    for ack in message.batch or (message,):
                        eid = ack.execution_id
                        if ack.HasField("error") and eid in unacked:
                            failure = PmlClientError.from_status(ack.error)
                            if worth_retrying(failure):
                                resend[eid] = (failure, ack)
                                continue
                        if unacked.pop(eid, None) is None:
                            continue  # an ack of an execution already answered
                        resend.pop(eid, None)
                        answer(ack)
                answer_held_back()
                if report.reconnects >= max_reconnects and unacked.keys() <= resend.keys():
                    for eid in list(unacked):  # out of reconnects: their errors answer them
                        del unacked[eid]
                        answer(resend.pop(eid)[1])
                if source_failed and not unacked:
                    raise source_failed[0]
                if exhausted and not unacked:
                    return report
                # The server ended the stream before answering everything: resend the rest.
                if report.reconnects >= max_reconnects:
                    raise PmlClientError(
                        grpc.StatusCode.UNAVAILABLE,
                        f"the stream ended with {len(unacked)} executions not acknowledged",
                    )
                if resend:  # not before the server's RetryInfo delay
                    delay = max((f.retry_delay_seconds or 0.0) for f, _ in resend.values())
                    time.sleep(backoff_seconds(report.reconnects, delay))
                report.reconnects += 1
            except grpc.RpcError as err:
                failure = self._failure(err, self._timeout)
                if silence.fired:  # cancelled here: say why
                    failure = PmlClientError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no answer from the server within {silence.seconds} s "
                        f"({len(unacked) - len(resend)} executions waiting)",
                    )
                retryable = worth_retrying(failure) or failure.code in (
                    grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retryable or report.reconnects >= max_reconnects:
                    raise failure from None
                # Exponential backoff with jitter, never shorter than the server's RetryInfo: a
                # server restarting within a second must not see every attempt fail at once.
                time.sleep(backoff_seconds(report.reconnects, failure.retry_delay_seconds))
                report.reconnects += 1
            finally:
                silence.stop()
