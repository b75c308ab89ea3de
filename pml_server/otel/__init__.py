"""OTLP trace ingest, the pure part: GenAI / MCP spans -> executions with a synthesized
canonical code text (no storage, model or gRPC here; `pml_server.api.otlp` serves it)."""

from pml_server.otel._attributes import without_lone_surrogates
from pml_server.otel._held import held_forms, settling_forms
from pml_server.otel._mapping import (
    INCOMPLETE_SPAN_ID,
    LATE_CALL,
    OWN_PREFIX,
    SETTLING,
    MappedBatch,
    MappedCall,
    MappedExecution,
    Rejection,
    flatten,
    incomplete_links,
    incomplete_marker,
    late_calls,
    map_spans,
    tool_of,
)
from pml_server.otel._wire import CUT_DEPTH, parse_export

__all__ = [
    "CUT_DEPTH",
    "INCOMPLETE_SPAN_ID",
    "LATE_CALL",
    "OWN_PREFIX",
    "SETTLING",
    "MappedBatch",
    "MappedCall",
    "MappedExecution",
    "Rejection",
    "flatten",
    "held_forms",
    "incomplete_links",
    "incomplete_marker",
    "late_calls",
    "map_spans",
    "parse_export",
    "settling_forms",
    "tool_of",
    "without_lone_surrogates",
]
