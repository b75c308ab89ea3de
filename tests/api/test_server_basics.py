"""A real server on a loopback port answers health checks and its own API."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pml_server import _core
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.api.server import RunningServer, start_server
from pml_server.config import config_of
from pml_server.storage import SCHEMA_VERSION, SchemaVersionError, Store
from pml_server.storage.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from tests.conftest import StartServer
from tests.support import open_engine


def test_health_serving(channel: grpc.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "pml.v1.PmlService"):
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_server_info(channel: grpc.Channel, server: RunningServer) -> None:
    reply = pml_pb2_grpc.PmlServiceStub(channel).GetServerInfo(
        pml_pb2.GetServerInfoRequest(), timeout=5
    )
    assert reply.core_version == _core.__version__
    assert reply.schema_version == SCHEMA_VERSION
    assert reply.embedding_dimension == server.engine.embedding_dim()
    assert (reply.tenant, reply.role) == ("default", "admin")


@pytest.mark.postgres
def test_server_info_names_the_schema_version_of_a_postgresql_store(
    start: StartServer, postgres_dsn: str
) -> None:
    """The schema version of the store served: a database's (docs/storage.md, Migrations),
    not the embedded store's, which GetServerInfo answered whatever the store."""
    server = start(store=postgres_dsn)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        reply = pml_pb2_grpc.PmlServiceStub(ch).GetServerInfo(
            pml_pb2.GetServerInfoRequest(), timeout=5
        )
    assert reply.schema_version == PG_SCHEMA_VERSION != SCHEMA_VERSION


def test_graceful_stop_reports_not_serving(server: RunningServer) -> None:
    server.health.enter_graceful_shutdown()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    import struct

    from rocksdict import Options, Rdict

    db = Rdict(str(tmp_path), Options(raw_mode=True))
    db.put(b"meta/schema_version", struct.pack(">I", SCHEMA_VERSION + 1))
    db.close()
    with pytest.raises(SchemaVersionError, match="schema version"):
        Store(tmp_path)


def test_bind_failure_is_clear(tmp_path: Path, server: RunningServer) -> None:
    config = config_of(listen=f"127.0.0.1:{server.port}", data_dir=tmp_path / "d2")
    with pytest.raises(OSError, match="could not bind"):
        start_server(config, engine=open_engine(config))


def test_a_reflection_stream_the_client_cancels_is_not_an_internal_error(
    channel: grpc.Channel, server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """grpcurl drops its reflection stream without closing it: the request iterator raised
    RpcError into the interceptor, which logged "internal error" with a traceback and counted
    INTERNAL for every such call. It is the client going away: CANCELLED, nothing logged."""
    import threading
    import time

    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    for _ in range(3):
        release = threading.Event()

        def requests(release: threading.Event = release) -> Iterator[Any]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            release.wait(5)

        call = stub.ServerReflectionInfo(requests())
        assert next(call).list_services_response.service
        call.cancel()
        release.set()

    def count(code: str) -> float:
        labels = {"method": "ServerReflectionInfo", "code": code}
        return server.metrics.registry.get_sample_value("pml_requests_total", labels) or 0.0

    # A cancel that reaches the server while it waits for the next request ends the request
    # iterator (the call then finishes OK) or makes it raise (CANCELLED): either is the
    # client going away, never INTERNAL.
    codes = ("CANCELLED", "OK", "DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN")
    deadline = time.monotonic() + 10
    while sum(count(c) for c in codes) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(count(c) for c in codes) == 3
    assert count("INTERNAL") == 0
    assert count("UNKNOWN") == 0
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]
