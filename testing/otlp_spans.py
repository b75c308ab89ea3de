"""Spans made with the real OpenTelemetry SDK and kept in memory, for the OTLP ingest tests that
export them by hand (`tests/api/test_otlp_ingest.py`, `tests/reliability/
test_otlp_split_runs.py`)."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer


def recorded(make: Callable[[Tracer], object]) -> list[ReadableSpan]:
    """The finished spans of `make(tracer)`, in the order they ended (a run's root last)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    make(provider.get_tracer("tests"))
    return list(memory.get_finished_spans())


def run_with_arguments(tracer: Tracer, root: str, arguments: str) -> str:
    """A run of one `read_file` call sent `arguments` as they are (a bad or hostile JSON text):
    an `invoke_agent` span named `root`, with no agent name nor messages, around its
    `execute_tool` span; that tool span's id, as pml's messages name it (16 hex digits)."""
    with (
        tracer.start_as_current_span(root, attributes={"gen_ai.operation.name": "invoke_agent"}),
        tracer.start_as_current_span(
            "execute_tool read_file",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read_file",
                "gen_ai.tool.call.arguments": arguments,
            },
        ) as call,
    ):
        return f"{call.get_span_context().span_id:016x}"
