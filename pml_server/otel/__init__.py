"""OTLP trace ingest, the pure part: GenAI / MCP spans -> executions with a synthesized
canonical code text (no storage, model or gRPC here; `pml_server.api.otlp` serves it)."""

from pml_server.otel._held import held_forms
from pml_server.otel._mapping import (
    MappedBatch,
    MappedCall,
    MappedExecution,
    Rejection,
    flatten,
    map_spans,
)

__all__ = [
    "MappedBatch",
    "MappedCall",
    "MappedExecution",
    "Rejection",
    "flatten",
    "held_forms",
    "map_spans",
]
