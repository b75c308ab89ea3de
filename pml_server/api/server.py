"""Server factory: builds the gRPC server with health checking and reflection, and runs it
until SIGTERM/SIGINT with a graceful drain."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures
from dataclasses import dataclass
from types import FrameType

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.api.servicer import PmlServicer
from pml_server.config import ServerConfig
from pml_server.storage import Store

log = logging.getLogger(__name__)

SERVICE_NAME = pml_pb2.DESCRIPTOR.services_by_name["PmlService"].full_name


@dataclass
class RunningServer:
    """A started server, the port it bound, and what must be closed after it stops."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    store: Store

    def stop(self, grace: float | None) -> None:
        """Report NOT_SERVING, drain in-flight calls for `grace` seconds, then close the store."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.store.close()


def start_server(config: ServerConfig) -> RunningServer:
    """Open the store, bind `config.listen` (port 0 picks a free port) and start serving."""
    store = Store(config.data_dir)
    # SO_REUSEPORT off: a second server on a busy port must fail, not silently share it.
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.max_workers),
        options=[("grpc.so_reuseport", 0)],
    )
    pml_pb2_grpc.add_PmlServiceServicer_to_server(PmlServicer(store), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    try:
        port = server.add_insecure_port(config.listen)
    except RuntimeError as err:  # grpcio raises instead of returning 0 on some versions
        port = 0
        cause: Exception | None = err
    else:
        cause = None
    if port == 0:
        store.close()
        raise OSError(f"could not bind {config.listen}") from cause
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("pml serving on port %d, data in %s", port, config.data_dir)
    return RunningServer(server=server, port=port, health=health_servicer, store=store)


def serve_forever(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    running = start_server(config)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: draining", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(
        f"pml listening on {config.listen} (port {running.port}), data in {config.data_dir}",
        flush=True,
    )
    stopping.wait()
    running.stop(config.grace_seconds)
