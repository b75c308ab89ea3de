"""Which engine the API tests run against: the real one when `pml_server.engine` exists (on
a real RocksDB in the test's directory, hashing embedder), else the in-memory test double.
Reopening the same data dir gives the same data in both cases."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pml_server.config import ServerConfig
from pml_server.domain.engine import EngineProtocol
from tests.fake_engine import FakeEngine

REAL_ENGINE = importlib.util.find_spec("pml_server.engine") is not None
_fakes: dict[Path, FakeEngine] = {}


def open_test_engine(config: ServerConfig) -> EngineProtocol:
    if REAL_ENGINE:
        from pml_server.api.server import open_engine

        return open_engine(config)
    fake = _fakes.setdefault(config.data_dir, FakeEngine())
    fake.closed = False
    return fake
