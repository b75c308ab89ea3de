"""A real server on a loopback port answers health checks and its own API."""

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pml_server import _core
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.api.server import RunningServer, start_server
from pml_server.config import config_of
from pml_server.storage import SCHEMA_VERSION, SchemaVersionError, Store
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
