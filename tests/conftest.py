"""Shared fixtures: a real server on a loopback port (port 0) with a real RocksDB on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server.api.server import RunningServer, start_server
from pml_server.config import ServerConfig


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(ServerConfig(listen="127.0.0.1:0", data_dir=tmp_path / "data"))
    yield running
    running.stop(grace=1.0)


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch
