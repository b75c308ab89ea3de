"""A served pml with its default models (MiniLM and its USE companion) answers a request in
French, German or Chinese with the capability recorded in English (docs/ranking.md, Other
languages), through the public API."""

from __future__ import annotations

import pytest

from pml_server.client import PmlClient, make_record
from tests.conftest import StartServer

pytestmark = pytest.mark.model  # every test here runs a real embedding model

MEMORY = [
    ("Find restaurants in Dallas", "await mcp.restaurant_search({city: 'Dallas'})"),
    ("Send an email to my boss", "await mcp.gmail_send({to: 'boss@example.com'})"),
    ("Resize vacation photos", "await mcp.image_resize({folder: 'vacation'})"),
]


def test_a_served_pml_answers_other_languages_from_english_recordings(
    start: StartServer,
) -> None:
    server = start(embedder="minilm")  # cross_lingual: its default, "use"
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        capability = {}
        for intent, code in MEMORY:
            tool = code.split("mcp.")[1].split("(")[0]
            capability[tool] = client.record(make_record(intent, code, tools=[tool])).capability
        for request, tool in [
            ("Trouve des restaurants à Dallas.", "restaurant_search"),
            ("Schick meinem Chef eine E-Mail", "gmail_send"),
            ("调整度假照片的大小", "image_resize"),
        ]:
            answer = client.suggest(request, k=3)
            assert answer.suggestions[0].capability == capability[tool], request
