"""Server factory: builds the engine and the gRPC server (health, reflection, auth, TLS, limits,
metrics) and runs it until SIGTERM/SIGINT with a graceful drain: health NOT_SERVING, refuse new
calls, finish in-flight ones, flush the captures still running, close the store."""

from __future__ import annotations

import errno
import faulthandler
import gc
import logging
import os
import signal
import ssl
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.api.admission.fairness import CpuFairness
from pml_server.api.admission.quotas import TenantQuotas
from pml_server.api.admission.refusal import EarlyRefusal
from pml_server.api.admission.stream_slots import StreamSlots
from pml_server.api.interceptor import ApiInterceptor
from pml_server.api.metrics import Metrics
from pml_server.api.otlp import SERVICE_NAME as OTLP_SERVICE_NAME
from pml_server.api.otlp import RunSettler, add_trace_ingest
from pml_server.api.otlp_http import OtlpHttpServer, Tls
from pml_server.api.security.auth import KeyStore
from pml_server.api.security.key_reload import KeysFileWatcher
from pml_server.api.security.page_tokens import PageTokens, load_or_create_secret
from pml_server.api.servicer import PmlServicer, ServiceDeps
from pml_server.config import Config, ServerConfig, bind_error, bind_problem, is_loopback
from pml_server.domain import model
from pml_server.domain.engine import EngineProtocol
from pml_server.domain.stdout import stdout_to_devnull
from pml_server.storage import SCHEMA_VERSION
from pml_server.storage.pending_spans import PendingSpans

log = logging.getLogger(__name__)

SERVICE_NAME = pml_pb2.DESCRIPTOR.services_by_name["PmlService"].full_name
_READY_POLL_SECONDS = 0.2
_FOLLOWER_WATCH_SECONDS = 0.5  # how often health looks at a replica's follower
SWITCH_INTERVAL_SECONDS = 0.0002


@dataclass
class RunningServer:
    """A started server, the port it bound, and what must be closed after it stops."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    engine: EngineProtocol
    servicer: PmlServicer
    capture_pool: futures.ThreadPoolExecutor
    metrics: Metrics
    early_refusal: EarlyRefusal | None = None
    metrics_port: int | None = None
    keys_watcher: KeysFileWatcher | None = None
    otlp_http: OtlpHttpServer | None = None
    settler: RunSettler | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def stop(self, grace: float | None) -> None:
        """NOT_SERVING, refuse new calls, drain in-flight calls for up to `grace` seconds, wait
        for running captures, then flush and close the engine. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.servicer.draining.set()
        self.health.enter_graceful_shutdown()
        if self.keys_watcher is not None:
            self.keys_watcher.stop()
        self.server.stop(grace).wait()
        if self.otlp_http is not None:
            self.otlp_http.stop()  # (draining: new Exports are answered 503)
        if self.settler is not None:
            self.settler.stop()  # (held runs stay held: settled after the next start)
        if self.early_refusal is not None:
            self.early_refusal.close()
        self.capture_pool.shutdown(wait=True)
        self.engine.close()
        self.metrics.close()
        log.info("pml stopped")


def open_engine(config: Config) -> EngineProtocol:
    """The real engine of `config.engine` (every engine setting, as `pml serve` opens it)."""
    from pml_server.service import Engine

    return Engine.open(config.engine)


def _credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    if config.tls_cert is None and config.tls_key is None:
        if config.tls_client_ca is not None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    _check_tls_files(config.tls_cert, config.tls_key, config.tls_client_ca)
    client_ca = config.tls_client_ca.read_bytes() if config.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def _check_tls_files(cert: Path, key: Path, client_ca: Path | None) -> None:
    """ValueError naming the flag and the file that cannot serve TLS: gRPC only logged "Invalid
    cert chain file" and failed the bind, so the start said "could not bind" (the OTLP/HTTP
    port takes the same files: `_tls`)."""
    for flag, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-client-ca", client_ca)):
        if path is None:
            continue
        if path.exists() and not path.is_file():
            # a FIFO (bash's `<(...)`) is read once, and these are read several times (the
            # OTLP/HTTP port too); one without a writer blocked the start for ever
            raise ValueError(f"{flag} {path}: not a regular file: write it to a file first")
        try:
            text = path.read_text(encoding="ascii", errors="replace")
        except OSError as err:
            raise ValueError(f"{flag} {path}: cannot read it: {err.strerror or err}") from None
        if flag != "--tls-key" and "-----BEGIN CERTIFICATE-----" not in text:
            raise ValueError(f"{flag} {path}: no PEM certificate")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as err:
        reason = (err.reason or str(err)).lower().replace("_", " ")
        raise ValueError(
            f"--tls-key {key}: not the private key of --tls-cert {cert} ({reason})"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(client_ca)
        except ssl.SSLError as err:
            reason = (err.reason or str(err)).lower().replace("_", " ")
            raise ValueError(
                f"--tls-client-ca {client_ca}: no PEM certificate ({reason})"
            ) from None


def _tls(config: ServerConfig) -> Tls | None:
    """The gRPC port's certificate for the OTLP/HTTP address too (`_credentials` checked it)."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    return Tls(config.tls_cert, config.tls_key, config.tls_client_ca)


def _options(config: ServerConfig) -> list[tuple[str, Any]]:
    return [
        # A second server on a busy port must fail, not silently share it.
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", min(4 * config.max_message_bytes, 2**31 - 1)),
        # Ping idle connections so dead peers are noticed; refuse clients that ping too often.
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 2),
    ]


def _quotas(config: ServerConfig, keys: KeyStore) -> TenantQuotas:
    # Alone on the server, a tenant may use every RPC thread; with neighbours, a quarter of them,
    # so one or two tenants at their limit still leave threads for everybody else.
    default = max(1, config.max_workers // 4) if keys.multi_tenant else config.max_workers
    return TenantQuotas(
        max_in_flight=config.tenant_max_in_flight or default,
        rate_per_second=config.tenant_rate,
        burst=config.tenant_burst,
    )


def _make_data_dir(path: Path) -> None:
    """Created before anything is written in it, so that a path that cannot be a directory
    gets one clear error (mkdir's own, "File exists", misleads; a symbolic link that loops or
    leads nowhere was called a file)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(
            f"{path} cannot be the data directory: {_why_not_a_directory(path)}"
        ) from None
    except OSError as err:  # a read-only file system, no permission, a loop above it
        reason = _why_not_a_directory(path) if err.errno == errno.ELOOP else err.strerror
        raise OSError(f"{path} cannot be the data directory: {reason}") from None


def _why_not_a_directory(path: Path) -> str:
    """What stops `path` being a directory: a symbolic link on the way that loops or leads
    nowhere (named with its target), else a file."""
    for where in (path, *path.parents):
        if not where.is_symlink():
            continue
        try:
            where.stat()
        except OSError as err:
            it = "it" if where == path else f"the folder above it {where}"
            if err.errno == errno.ELOOP:
                return f"{it} is a symbolic link in a loop ({where} -> {os.readlink(where)})"
            return f"{it} is a symbolic link to {os.readlink(where)}, which does not exist"
    return "it, or a folder above it, is a file"


def start_server(whole: Config, engine: EngineProtocol | None = None) -> RunningServer:
    """Build everything from `whole` (port 0 picks a free port) and start serving. `engine`
    replaces the real one (tests of the API layer only); requests are checked against
    `whole.engine.limits` either way."""
    config = whole.server
    keys = KeyStore.load(config.keys_file)
    for listen in (config.listen, config.otlp_http_listen):
        if (
            listen is not None
            and not keys.multi_tenant
            and not config.allow_insecure_remote
            and not is_loopback(listen)
        ):
            raise ValueError(
                f"refusing to listen on {listen} without a keys file: anyone could read "
                "and write. Pass --keys-file, or --allow-insecure-remote if you really mean it"
            )
    credentials = _credentials(config)
    _make_data_dir(whole.engine.data_dir)
    opened = engine is None
    if engine is None:
        engine = open_engine(whole)
    # After the store is open: a restored copy of a backup is checked before anything is
    # written into its directory, and one refused must be left as it was (docs/storage.md,
    # Backups and restore); the secret was written into it first.
    secret_file = config.page_token_secret_file or whole.engine.data_dir / "page-token.key"
    try:
        tokens = PageTokens(load_or_create_secret(secret_file))
    except OSError as err:  # a directory, a file under a file: one line naming the flag
        if opened:
            engine.close()
        raise ValueError(
            f"--page-token-secret-file {secret_file}: cannot read or create it: "
            f"{err.strerror or err}"
        ) from None
    except BaseException:
        if opened:
            engine.close()
        raise
    metrics = Metrics()
    metrics.watch_embedding(engine.embedding_usage)
    # The real engine's operator part (`service/_admin.py`); an engine a test builds may have
    # none.
    admin = getattr(engine, "admin", None)
    follower_lag = getattr(admin, "follower_lag", None)
    if follower_lag is not None:
        metrics.watch_follower(follower_lag)
    capture_pool = futures.ThreadPoolExecutor(
        max_workers=config.capture_workers, thread_name_prefix="pml-capture"
    )

    def count_capture(result: model.CaptureResult) -> None:
        metrics.captures.labels(result.outcome.value).inc()

    quotas = _quotas(config, keys)
    fairness = CpuFairness()
    metrics.watch_fairness(fairness.totals)
    backup_status = getattr(admin, "backup_status", None)
    if backup_status is not None:
        metrics.watch_backups(backup_status)
    # A thread waiting for the GIL takes it from a running one only after the switch interval
    # (5 ms by default). A cheap call needs the GIL a few times (grpcio's poll thread, its RPC
    # thread, after each core or store call), so beside a long call each of those waits was up
    # to 5 ms; 0.2 ms bounds them at a cost of more switches only while threads contend.
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_SECONDS))
    early_refusal = EarlyRefusal(keys, quotas)
    servicer = PmlServicer(
        ServiceDeps(
            engine=engine,
            keys=keys,
            tokens=tokens,
            limits=whole.engine.limits.with_bounds(open_executions=config.max_open_executions),
            capture_pool=capture_pool,
            quotas=quotas,
            stream_window=config.stream_window,
            streams=StreamSlots(
                config.max_streams or max(1, config.max_workers // 2),
                config.max_streams_per_connection,
            ),
            stream_idle_seconds=config.stream_idle_seconds,
            schema_version=int(getattr(engine, "schema_version", SCHEMA_VERSION)),
            on_capture=count_capture,
            fairness=fairness,
            max_message_bytes=config.max_message_bytes,
        )
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.max_workers, thread_name_prefix="pml-rpc"),
        interceptors=[ApiInterceptor(metrics, early_refusal)],
        options=_options(config),
        maximum_concurrent_rpcs=config.max_concurrent_rpcs,
    )
    pml_pb2_grpc.add_PmlServiceServicer_to_server(servicer, server)
    store = getattr(admin, "store", None)
    pending = (
        None
        if store is None
        else PendingSpans(
            store,
            config.otlp_pending_spans,
            config.otlp_pending_seconds,
            lambda: int(time.time() * 1000),
            config.otlp_settle_seconds,
        )
    )
    otlp = add_trace_ingest(server, servicer, metrics, pending)
    settler = None if pending is None else RunSettler(otlp, pending)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, OTLP_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    # An address that cannot be bound is found first, so the error names its cause instead of
    # gRPC's log line and "could not bind" (and asked again if gRPC refuses it after all).
    cause: BaseException | None = bind_problem(config.listen)
    port = 0
    if cause is None:
        try:
            if credentials is None:
                port = server.add_insecure_port(config.listen)
            else:
                port = server.add_secure_port(config.listen, credentials)
        except RuntimeError as err:  # grpcio raises instead of returning 0 on some versions
            cause = err

    def abandon() -> None:
        """Let go of what this start opened, before it raises."""
        server.stop(None)
        capture_pool.shutdown()
        early_refusal.close()
        engine.close()

    if port == 0:
        abandon()
        raise bind_error(config.listen, bind_problem(config.listen) or cause) from None
    otlp_http = None
    if config.otlp_http_listen is not None:
        try:
            otlp_http = OtlpHttpServer(
                otlp.export,
                otlp.admit,
                config.otlp_http_listen,
                config.max_message_bytes,
                _tls(config),
                on_answer=lambda status: metrics.otlp_http.labels(str(status)).inc(),
            )
        except OSError:
            abandon()
            raise
    metrics_port = None
    if config.metrics_port is not None:
        try:
            metrics_port = metrics.serve(config.metrics_port, config.metrics_host)
        except OSError as err:
            if otlp_http is not None:
                otlp_http.stop()
            abandon()
            address = f"{config.metrics_host}:{config.metrics_port}"
            raise bind_error(address, err, "the metrics address ") from None
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    server.start()
    if otlp_http is not None:
        otlp_http.start()
    if settler is not None:
        settler.start()
    keys_watcher = KeysFileWatcher(keys)
    keys_watcher.start()
    running = RunningServer(
        server=server,
        port=port,
        health=health_servicer,
        engine=engine,
        servicer=servicer,
        capture_pool=capture_pool,
        metrics=metrics,
        early_refusal=early_refusal,
        metrics_port=metrics_port,
        keys_watcher=keys_watcher,
        otlp_http=otlp_http,
        settler=settler,
    )
    threading.Thread(target=_report_ready, args=(running,), name="pml-ready", daemon=True).start()
    log.info(
        "pml serving",
        extra={
            "port": port,
            "data_dir": str(whole.engine.data_dir),
            "tls": credentials is not None,
            "multi_tenant": keys.multi_tenant,
            "metrics_port": metrics_port,
            "otlp_http_port": None if otlp_http is None else otlp_http.port,
        },
    )
    return running


# How long closing may take after the drain's grace (waiting captures, the engine's flush and
# snapshot: seconds, minutes for a large index) before the process is deemed hung.
SHUTDOWN_HANG_SECONDS = 300.0
_SIGNAL_WAIT_SLICE_SECONDS = 0.25


class StopSignal:
    """SIGTERM and SIGINT, caught from construction on; `wait` blocks the main thread until
    one has come and returns its number.

    The kernel hands a process's signal to any thread not blocking it (gRPC's and ours do
    not), while Python runs the handler only on the main thread, between bytecodes: a main
    thread blocked on a lock with no timeout never gets to it (cpython issue 85300), so `wait`
    sleeps in slices. The handler only appends to a list: run between any two bytecodes, it
    could find the main thread inside `Event.wait` holding the event's own lock, and
    `Event.set` there would wait for that lock forever."""

    def __init__(self) -> None:
        self._caught: list[int] = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self._caught.append(signum)

    def wait(self) -> int:
        while not self._caught:
            time.sleep(_SIGNAL_WAIT_SLICE_SECONDS)
        return self._caught[0]


_heap_frozen = threading.Event()


def _freeze_loaded_heap() -> None:
    """What the open loaded lives as long as the server: frozen, the collector's full passes
    no longer walk it (one over a 10k store took about 190 ms, every few seconds under Suggest
    load: a tenth of a caller's time). Once a process: a frozen object is never collected, so
    a process starting servers one after the other (tests) must not freeze each one's heap."""
    if not _heap_frozen.is_set():
        _heap_frozen.set()
        gc.collect()
        gc.freeze()


def _report_ready(running: RunningServer) -> None:
    """Health says SERVING only once the vector index has caught up with the store; then, on a
    replica of a shared store, NOT_SERVING while its op log follower is stalled (its indexes
    no longer follow the store: docs/storage.md, Replicas), SERVING again once it follows."""
    while not running._stopped.is_set():
        if running.engine.is_ready():
            _freeze_loaded_heap()
            break
        running._stopped.wait(_READY_POLL_SECONDS)
    follower_lag = getattr(getattr(running.engine, "admin", None), "follower_lag", None)
    shown: int | None = None
    while not running._stopped.is_set():
        lag = follower_lag() if follower_lag is not None else None
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if lag is not None and lag.stalled is not None
            else health_pb2.HealthCheckResponse.SERVING
        )
        if status != shown:
            for name in ("", SERVICE_NAME):
                running.health.set(name, status)  # ignored once draining
            shown = status
        if follower_lag is None:
            return
        running._stopped.wait(_FOLLOWER_WATCH_SECONDS)


def _announce(line: str) -> None:
    """A line on stdout for whoever started the server; a reader that went away (a script
    that read the port and closed its pipe) does not stop the server: stdout then goes to
    /dev/null."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        stdout_to_devnull()


def serve_forever(whole: Config, engine: EngineProtocol | None = None) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    running = start_server(whole, engine)
    config = whole.server
    stop_signal = StopSignal()

    def on_hangup(_signum: int, _frame: FrameType | None) -> None:
        if running.keys_watcher is not None:
            running.keys_watcher.reload("SIGHUP")

    def on_backup_signal(_signum: int, _frame: FrameType | None) -> None:
        request = getattr(getattr(running.engine, "admin", None), "request_backup", None)
        if request is None or not request():
            log.warning("SIGUSR2: no backup taken: start pml serve with --backup-dir")

    signal.signal(signal.SIGHUP, on_hangup)
    # On SIGUSR2, a backup into --backup-dir (and never the signal's default: ending the
    # process).
    signal.signal(signal.SIGUSR2, on_backup_signal)
    # On SIGUSR1, every thread's traceback on stderr: where a server that seems stuck is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    where = str(whole.engine.data_dir)
    if whole.engine.store:
        from pml_server.storage.postgres import describe

        where = f"postgresql://{describe(whole.engine.store)} (shared store)"
    _announce(f"pml listening on {config.listen} (port {running.port}), data in {where}")
    if running.otlp_http is not None:
        host = config.otlp_http_listen.rpartition(":")[0] if config.otlp_http_listen else ""
        scheme = "https" if config.tls_cert is not None else "http"
        url = f"{scheme}://{host}:{running.otlp_http.port}/v1/traces"
        _announce(f"OTLP/HTTP traces on {url}")
    log.info("signal %d: draining", stop_signal.wait())
    # A shutdown that hangs past the drain is a bug, but SIGTERM must still end the process:
    # then every thread's traceback goes to stderr (where it hung) and the exit code is 1.
    faulthandler.dump_traceback_later(config.grace_seconds + SHUTDOWN_HANG_SECONDS, exit=True)
    running.stop(config.grace_seconds)
    faulthandler.cancel_dump_traceback_later()
