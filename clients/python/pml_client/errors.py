"""The client's one error type and its retry policy: what a failed call says (status code,
BadRequest field violations, the server's RetryInfo delay) and how long to wait before trying a
call again."""

from __future__ import annotations

import random
from collections.abc import Sequence

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

RETRY_BASE_SECONDS = 0.1
RETRY_MAX_SECONDS = 2.0
# How long a unary call safe to repeat keeps retrying after its first failure on these codes
# (the server says waiting helps: a quota, a server starting or stopping, a replica
# unreachable), within its timeout: longer than a `pml serve` restart (a rolling upgrade,
# 1-3 s), short enough that a server that is gone fails the call in seconds, not at its
# timeout (docs/api.md, Deadlines and retries). The three clients share it.
DEFAULT_RETRY_SECONDS = 5.0
# No cap on the count by default: the retry budget and the timeout bound the retries.
DEFAULT_RETRIES = None
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


# grpcio's refusal of a call over the server's `--max-concurrent-rpcs`, made before any
# handler runs, so without RetryInfo: a busy server, not a size limit (docs/api.md, Deadlines
# and retries). Nothing of the call was done.
CONCURRENCY_REFUSAL = "Concurrent RPC limit exceeded!"


def worth_retrying(failure: PmlClientError) -> bool:
    """Waiting may help: UNAVAILABLE, or RESOURCE_EXHAUSTED with the server's RetryInfo (a
    quota) or grpcio's `CONCURRENCY_REFUSAL`. RESOURCE_EXHAUSTED without either is a size
    limit (a message over the server's `--max-message-bytes`): the same request fails the same
    way, so it is not sent again (it was, `retries` times, megabytes each)."""
    if isinstance(failure, (CertificateError, ClientCertificateError, TlsMismatchError)):
        return False
    if failure.code is grpc.StatusCode.UNAVAILABLE:
        return True
    return failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED and (
        failure.retry_delay_seconds is not None or failure.message == CONCURRENCY_REFUSAL
    )


def retry_wait(
    attempt: int, server_delay: float | None, now: float, retry_until: float, deadline: float
) -> float | None:
    """How long to wait before retry `attempt` (0 first) at `now` (`time.monotonic()`), or
    None when no retry is to be made: the backoff, cut to end at `retry_until` (the retry
    budget's end: the last retry is made then), never less than the server's RetryInfo
    `server_delay`; None once the budget is spent or when the wait would end past it or at the
    call's `deadline` (docs/api.md, Deadlines and retries)."""
    if now >= retry_until:
        return None
    wait = max(min(backoff_seconds(attempt), retry_until - now), server_delay or 0.0)
    if now + wait > retry_until or now + wait >= deadline:
        return None
    return wait


def backoff_seconds(attempt: int, server_delay: float | None = None) -> float:
    """How long to wait before retry `attempt` (0 first): 0.1 s doubling up to 2 s, with full
    jitter on its upper half, and at least the delay the server asked for in RetryInfo."""
    ceiling = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2**attempt)
    wait = ceiling / 2 + random.uniform(0, ceiling / 2)
    return float(max(wait, server_delay or 0.0))


class PmlClientError(Exception):
    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        violations: Sequence[tuple[str, str]] = (),
        retry_delay_seconds: float | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.violations = list(violations)
        self.retry_delay_seconds = retry_delay_seconds
        detail = "".join(f"\n  {f}: {d}" for f, d in self.violations)
        super().__init__(f"{code.name}: {message}{detail}")

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> PmlClientError:
        message = err.details() or ""
        if err.code() is grpc.StatusCode.UNAVAILABLE and any(
            words in message for words in _CERTIFICATE_FAILURES
        ):
            return CertificateError(message)
        if err.code() is grpc.StatusCode.UNAVAILABLE and _NOT_TLS in message:
            return TlsMismatchError(message, server_speaks_tls=False)
        return cls._with_details(err.code(), message, rpc_status.from_call(err))

    @classmethod
    def from_status(cls, status: status_pb2.Status) -> PmlClientError:
        """The error a `google.rpc.Status` says (a stream's acknowledgement of one execution)."""
        code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
        return cls._with_details(code, status.message, status)

    @classmethod
    def _with_details(
        cls, code: grpc.StatusCode, message: str, status: status_pb2.Status | None
    ) -> PmlClientError:
        violations: list[tuple[str, str]] = []
        retry_delay = None
        if status is not None:
            for detail in status.details:
                if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    detail.Unpack(bad)
                    violations += [(v.field, v.description) for v in bad.field_violations]
                elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    info = error_details_pb2.RetryInfo()
                    detail.Unpack(info)
                    retry_delay = info.retry_delay.ToNanoseconds() / 1e9
        return cls(code, message, violations, retry_delay)


_CODES = {code.value[0]: code for code in grpc.StatusCode}

# gRPC's words (BoringSSL's) for a server certificate the client did not verify: a CA that did
# not sign it, a name it does not hold.
_CERTIFICATE_FAILURES = ("CERTIFICATE_VERIFY_FAILED", "Hostname Verification Check failed")


# BoringSSL's words when what a TLS client reads is no TLS record: a server in plaintext.
_NOT_TLS = "WRONG_VERSION_NUMBER"


class TlsMismatchError(PmlClientError):
    """TLS on one side only: a TLS client and a server in plaintext (`WRONG_VERSION_NUMBER`), or
    a client in plaintext and a TLS server (UNAVAILABLE "Socket closed"; the client makes a
    handshake of its own to tell it from a server that went away:
    `client._speaks_tls`). gRPC says UNAVAILABLE, as of a server down: each call was retried
    for its retry budget. No wait cures it: `worth_retrying` is False, and the message names
    the option (docs/api.md, Deadlines and retries)."""

    def __init__(self, grpc_message: str, *, server_speaks_tls: bool) -> None:
        self.grpc_message = grpc_message
        self.server_speaks_tls = server_speaks_tls
        super().__init__(grpc.StatusCode.UNAVAILABLE, self.saying("tls=True"))

    def saying(self, tls_option: str) -> str:
        """The message, naming the TLS option as the caller knows it (the CLI: `--tls`)."""
        if self.server_speaks_tls:
            return (
                f"TLS: the server speaks TLS and this client connected in plaintext "
                f"({self.grpc_message}): pass {tls_option}; not retried"
            )
        return (
            f"TLS: the server does not speak TLS ({self.grpc_message}): connect without "
            f"{tls_option}, or serve it with a certificate; not retried"
        )


class CertificateError(PmlClientError):
    """The server's TLS certificate was not verified. gRPC says UNAVAILABLE, as of a server
    down: each call was tried `retries` more times and an upload reconnected until out of
    reconnects, never saying why. No wait cures it: `worth_retrying` is False, and the
    message names `root_certificates` (docs/api.md, Deadlines and retries)."""

    def __init__(self, grpc_message: str) -> None:
        self.grpc_message = grpc_message
        super().__init__(grpc.StatusCode.UNAVAILABLE, self.saying("root_certificates"))

    def saying(self, ca_option: str) -> str:
        """The message, naming the CA option as the caller knows it (the CLI: `--tls-ca`)."""
        return (
            f"TLS: the server's certificate was not verified ({self.grpc_message}): "
            f"{ca_option} must be the PEM of the CA that signed it (without it, the system's "
            "roots are used), and the certificate must hold the target's host; not retried"
        )


class ClientCertificateError(PmlClientError):
    """The server asks for a client certificate (mutual TLS) and none was given: it refuses
    the handshake, which gRPC says UNAVAILABLE "Socket closed", as of a server that went away:
    each call was retried for its retry budget, never saying why. The client, seeing that
    error over TLS without a certificate, makes a handshake of its own to ask
    (`client._asks_for_client_certificate`); no wait cures it: `worth_retrying` is False, and
    the message names `client_cert` and `client_key` (docs/api.md, Deadlines and retries)."""

    def __init__(self, grpc_message: str) -> None:
        self.grpc_message = grpc_message
        super().__init__(grpc.StatusCode.UNAVAILABLE, self.saying("client_cert and client_key"))

    def saying(self, certificate_options: str) -> str:
        """The message, naming the options as the caller knows them (the CLI: `--tls-cert and
        --tls-key`)."""
        return (
            "TLS: the server refused the handshake: it asks for a client certificate (mutual "
            f"TLS) and none was given ({self.grpc_message}): pass {certificate_options}, a "
            "certificate its client CA signed; not retried"
        )
