"""Plans in the Suggest answer through a real server on port 0 (docs/ranking.md, Plans), the
MCP output model and `pml suggest`'s rendering at 80 columns."""

from __future__ import annotations

import io

import grpc
import pytest
from rich.console import Console

from pml_server.cli import _render as cli_render
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.mcp import _models

STORED = [
    ("search for a movie by its title", "const r1 = await mcp.search_movie({query: \"Alien\"});",
     ["search_movie"]),
    ("send an email message to a colleague",
     "const r1 = await mcp.send_email({to: \"ann@example.com\", body: \"hi\"});", ["send_email"]),
    ("read a json file from the disk", "const r1 = await mcp.read_file({path: \"a.json\"});",
     ["read_file"]),
    ("convert a temperature from celsius to fahrenheit",
     "const r1 = await mcp.convert_temperature({celsius: 20});", ["convert_temperature"]),
]  # fmt: skip
COMPOSE = (
    "Search for the movie Mulholland Drive by its title. "
    "Then send an email message to my colleague with the result."
)


@pytest.fixture
def stored(client: PmlClient) -> PmlClient:
    for intent, code, tools in STORED:
        client.record(make_record(intent, code, language="javascript", tools=tools))
    return client


def test_suggest_answer_carries_plans(stored: PmlClient) -> None:
    reply = stored.suggest(COMPOSE, 5)
    assert reply.suggestions  # the suggestions are still there
    assert reply.plans
    top = reply.plans[0]
    assert list(top.tools) == ["search_movie", "send_email"]
    assert [list(p.covers_index) for p in top.parts] == [[0], [1]]
    assert [p.suggestion.pattern.tools_used[p.steps[0]] for p in top.parts] == [
        "search_movie",
        "send_email",
    ]
    assert top.score.coverage == 1.0
    assert top.score.total > top.score.best_single
    assert len(top.score.part_match) == len(top.parts) == len(top.score.part_reliability)
    caps = [p.suggestion.capability for p in top.parts]
    assert len(set(caps)) == len(caps)
    # the same answer, as the MCP suggest tool shows it
    out = _models.plan(top)
    assert out.tools == ["search_movie", "send_email"]
    assert [p.steps for p in out.parts] == [["search_movie"], ["send_email"]]
    # and as `pml suggest` prints it, within 80 columns
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=False, color_system=None)
    cli_render.suggestions(console, reply, explain=True)
    text = buffer.getvalue()
    assert "Plans:" in text
    assert "search_movie > send_email" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_plan_size_zero_turns_plans_off(stored: PmlClient) -> None:
    assert not stored.suggest(COMPOSE, 5, plan_size=0).plans
    assert len(stored.suggest(COMPOSE, 5, plan_size=1).plans) <= 1


def test_one_part_request_gets_no_plan(stored: PmlClient) -> None:
    reply = stored.suggest("search for a movie by its title", 5)
    assert reply.suggestions
    assert not reply.plans


def test_plan_size_out_of_range_names_the_field(stored: PmlClient) -> None:
    with pytest.raises(PmlClientError) as err:
        stored.suggest(COMPOSE, 5, plan_size=11)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in err.value.violations] == ["plan_size"]


def _ranked(reply: object) -> list[tuple[str, str, float]]:
    return [
        (s.capability, s.pattern.name, round(s.score.match, 9))
        for s in reply.suggestions  # type: ignore[attr-defined]
    ]


def test_plans_never_change_the_suggestions(stored: PmlClient) -> None:
    # the request and its parts are embedded in one call with plans on: the request's
    # suggestions are those it gets alone
    on = stored.suggest(COMPOSE, 5)
    off = stored.suggest(COMPOSE, 5, plan_size=0)
    assert on.plans
    assert _ranked(on) == _ranked(off)


def test_a_client_vector_with_plans_on(stored: PmlClient) -> None:
    dim = stored.server_info().embedding_dimension
    vector = [1.0 / dim**0.5] * dim
    on = stored.suggest(COMPOSE, 5, intent_embedding=vector)
    off = stored.suggest(COMPOSE, 5, intent_embedding=vector, plan_size=0)
    assert _ranked(on) == _ranked(off)
    assert on.plans  # the parts are embedded by the server
    with pytest.raises(PmlClientError) as err:
        stored.suggest(COMPOSE, 5, intent_embedding=vector[:-1])
    assert [field for field, _ in err.value.violations] == ["intent_embedding"]


def test_bad_arguments_with_plans_on_name_the_field(stored: PmlClient) -> None:
    with pytest.raises(PmlClientError) as err:
        stored.suggest(COMPOSE, 5, min_match=2.0)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in err.value.violations] == ["min_match"]


def test_a_request_one_capability_covers_gets_no_plan(stored: PmlClient) -> None:
    stored.record(
        make_record(
            "search for a movie by its title then send an email message to a colleague",
            'const r1 = await mcp.search_movie({query: "Alien"});\n'
            'const r2 = await mcp.send_email({to: "ann@example.com", body: "hi"});',
            language="javascript",
            tools=["search_movie", "send_email"],
        )
    )
    reply = stored.suggest(COMPOSE, 5)
    assert list(reply.suggestions[0].pattern.tools_used) == ["search_movie", "send_email"]
    assert not reply.plans
