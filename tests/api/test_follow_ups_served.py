"""A served pml with its default model reads a request that says too little alone with the
agent's previous step, and says so (docs/ranking.md, Sessions, "Follow-up requests"), through
the public API: gRPC and the CLI's rendering of its answer."""

from __future__ import annotations

import pytest
from rich.console import Console

from pml_server.cli import _render
from pml_server.client import PmlClient, make_record
from tests.conftest import StartServer

pytestmark = pytest.mark.model  # a real embedding model

MEMORY = [
    ("Convert 100 USD to EUR", "convert_currency"),
    ("Weather forecast for London", "get_weather"),
    ("Book a hotel room in Rome", "book_hotel"),
]


def test_a_follow_up_is_read_with_the_previous_step_and_says_so(start: StartServer) -> None:
    server = start(embedder="minilm")
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        capability = {}
        for intent, tool in MEMORY:
            record = make_record(intent, f"await mcp.{tool}({{}})", tools=[tool])
            capability[tool] = client.record(record).capability
        alone = client.suggest("what about 50 GBP?")
        assert not alone.read_as_follow_up
        assert [s.capability for s in alone.suggestions][:1] != [capability["convert_currency"]]
        got = client.suggest("what about 50 GBP?", previous_tools=["convert_currency"])
        assert got.read_as_follow_up
        assert got.suggestions[0].capability == capability["convert_currency"]
        console = Console(width=100, record=True)
        _render.suggestions(console, got, intent="what about 50 GBP?")
        assert "read with the previous step" in console.export_text()
        whole = client.suggest("Book a hotel room in Madrid", previous_tools=["get_weather"])
        assert not whole.read_as_follow_up
        assert whole.suggestions[0].capability == capability["book_hotel"]
