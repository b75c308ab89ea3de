"""The engine the API tests run against: the real `Engine` on a real RocksDB in the test's
directory, opened exactly as `pml serve` opens it from its flags (`open_engine`); the tests pick
the hashing embedder for speed. Waits until the indexes have caught up, so tests start ready."""

from __future__ import annotations

from pml_server.api.server import open_engine
from pml_server.config import ServerConfig
from pml_server.engine import Engine


def open_test_engine(config: ServerConfig) -> Engine:
    engine = open_engine(config)
    assert isinstance(engine, Engine)
    assert engine.wait_ready(60)
    return engine
