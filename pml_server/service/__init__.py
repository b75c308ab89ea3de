"""The engine: composition root of capture, store, embeddings, search indexes, ranking and
retention. `Engine.open(config)` gives an `EngineProtocol` (pml_server/domain/engine.py); the
private modules beside it hold one concept each (see `service/engine.py`)."""

from __future__ import annotations

from pml_server.service.engine import Engine, wall_clock_ms

__all__ = ["Engine", "wall_clock_ms"]
