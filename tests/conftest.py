"""Shared fixtures: a real server on a loopback port (port 0) over an engine on disk."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import settings

from pml_server.api.security.auth import Role, add_key
from pml_server.api.server import RunningServer, start_server
from pml_server.client import PmlClient
from pml_server.config import config_of
from pml_server.domain.engine import EngineProtocol
from tests.postgres_cluster import (  # noqa: F401 (fixtures)
    own_postgres_cluster,
    postgres_cluster,
    postgres_dsn,
    replicas,
)
from tests.support import open_engine

StartServer = Callable[..., RunningServer]

# Property tests draw the same examples on every run (`repeatable`, the default: a red run can
# be run again and a green change stays green on CI); `HYPOTHESIS_PROFILE=explore` draws new
# ones each run, to search further (docs/contributing.md, Tests).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# What a test needs beyond Python, by the fixtures it uses or the module it is in: the marker
# lets `make test-quick` (`-m "not slow and not postgres and not fuse and not go and not node
# and not model"`) leave it out; `make test` runs every test and installs what they need
# (tools/system_deps.sh). A test that runs a real embedding model is marked `model` where it is
# written (`pytest.mark.model`): what it needs is in its body, not in a fixture.
_NEEDS_FIXTURE = {
    "postgres_dsn": "postgres",
    "postgres_cluster": "postgres",
    "own_postgres_cluster": "postgres",
    "mount": "fuse",
}
_NEEDS_MODULE = {
    "tests/api/test_go.py": "go",
    "tests/api/test_node.py": "node",
    "tests/api/test_replicas.py": "postgres",
    "tests/reliability/test_power_loss.py": "fuse",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        needs = {
            _NEEDS_FIXTURE[f] for f in getattr(item, "fixturenames", ()) if f in _NEEDS_FIXTURE
        }
        module = item.nodeid.split("::", 1)[0]
        if module in _NEEDS_MODULE:
            needs.add(_NEEDS_MODULE[module])
        for name in sorted(needs):
            item.add_marker(getattr(pytest.mark, name))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def start(data_dir: Path) -> Iterator[StartServer]:
    """Start servers on port 0 with any setting overrides (server or engine, by name:
    `config_of`); all are stopped at the end."""
    started: list[RunningServer] = []

    def _start(engine: EngineProtocol | None = None, **overrides: object) -> RunningServer:
        settings: dict[str, object] = {
            "listen": "127.0.0.1:0",
            "data_dir": data_dir,
            "embedder": "hashing",
            "durability": "fast",
        }
        config = config_of(**{**settings, **overrides})
        engine = engine or open_engine(config)
        try:
            running = start_server(config, engine=engine)
        except Exception:
            engine.close()
            raise
        started.append(running)
        return running

    yield _start
    for running in started:
        running.stop(grace=1.0)


@pytest.fixture
def server(start: StartServer) -> RunningServer:
    return start()


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture
def client(server: RunningServer) -> Iterator[PmlClient]:
    with PmlClient(f"127.0.0.1:{server.port}") as c:
        yield c


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A keys file with two tenants (acme, globex) and one key per role for acme."""
    path = tmp_path / "keys.json"
    found = {
        "acme-admin": add_key(path, "acme", Role.ADMIN),
        "acme-write": add_key(path, "acme", Role.WRITE),
        "acme-read": add_key(path, "acme", Role.READ),
        "globex-admin": add_key(path, "globex", Role.ADMIN),
    }
    return path, found
