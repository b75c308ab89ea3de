"""The engine the API tests run against: the real `Engine` on a real RocksDB in the test's
directory (hashing embedder for speed), opened exactly as `pml serve` opens it from its flags.
The Rust normalizer is the engine's default."""

from __future__ import annotations

from pml_server.config import EngineConfig, ServerConfig
from pml_server.engine import Engine


def open_test_engine(config: ServerConfig) -> Engine:
    engine = Engine.open(
        EngineConfig(
            data_dir=config.data_dir,
            embedder=config.embedder,
            durability=config.durability,
            max_code_bytes=config.max_code_bytes,
            max_tool_calls=config.max_tool_calls,
            vector_index=config.vector_index,
        )
    )
    assert engine.wait_ready(60)
    return engine
