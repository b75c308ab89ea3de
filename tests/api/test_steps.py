"""Steps and data flow of a pattern (docs/normalization.md, Steps) through the public API,
the MCP tools' structured output and `pml show`, against a real server."""

from __future__ import annotations

import pytest

from pml_server import cli
from pml_server._proto.pml.v1 import resources_pb2 as r
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record
from pml_server.mcp import _models

FLOW = (
    'const r1 = await mcp.search_person({query: "Tom Hanks"});\n'
    "const r2 = await mcp.get_person_movie_credit({person_id: r1.id});\n"
    'const r3 = await mcp.get_weather({city: "Paris"});\n'
    'await mcp.send_message({text: `${r2["title"]} and ${r3.summary}`, urgent: true});\n'
)
TOOLS = ["search_person", "get_person_movie_credit", "get_weather", "send_message"]


def _record(client: PmlClient) -> r.CaptureResult:
    return client.record(make_record("movies of an actor and the weather", FLOW, tools=TOOLS))


def _check(steps: list[r.Step]) -> None:
    assert [s.tool for s in steps] == TOOLS
    assert [s.index for s in steps] == [0, 1, 2, 3]
    assert [list(s.depends_on) for s in steps] == [[], [0], [], [1, 2]]
    query = steps[0].arguments[0]
    assert (query.name, query.kind, list(query.parameters)) == (
        "query",
        r.StepArgument.KIND_PARAMETER,
        ["$QUERY"],
    )
    person = steps[1].arguments[0]
    assert person.kind == r.StepArgument.KIND_REFERENCE
    assert [(x.step, x.path) for x in person.sources] == [(0, ".id")]
    text, urgent = steps[3].arguments
    assert [(x.step, x.path) for x in text.sources] == [(1, '["title"]'), (2, ".summary")]
    assert urgent.kind == r.StepArgument.KIND_LITERAL
    assert all(s.flow_known for s in steps)


def test_get_pattern_and_suggest_show_steps(client: PmlClient) -> None:
    saved = _record(client)
    _check(list(client.get_pattern(saved.pattern).steps))
    reply = client.suggest("movies of an actor and the weather", k=1)
    _check(list(reply.suggestions[0].pattern.steps))
    out = _models.suggestion(reply.suggestions[0])
    assert [s.depends_on for s in out.steps] == [[], [0], [], [1, 2]]
    assert out.steps[1].arguments[0].kind == "reference"
    assert out.steps[1].arguments[0].sources[0].path == ".id"
    detail = _models.pattern(client.get_pattern(saved.pattern))
    assert detail.steps[0].arguments[0].parameters == ["$QUERY"]


def test_a_call_per_element_keeps_call_order_and_reads_one_element(client: PmlClient) -> None:
    """A call in a loop runs an unknown number of times (its flow is not known: steps keep call
    order), and its argument reads one element of what the loop walks (docs/normalization.md,
    Steps)."""
    code = (
        "const r = await mcp.list_items({});\n"
        "for (const it of r.items) { await mcp.get_item({id: it.id}); }"
    )
    saved = client.record(make_record("fetch all items", code, tools=["list_items", "get_item"]))
    steps = client.get_pattern(saved.pattern).steps
    assert [(s.tool, s.flow_known) for s in steps] == [("list_items", True), ("get_item", False)]
    assert steps[1].arguments[0].kind == r.StepArgument.KIND_REFERENCE
    assert [(x.step, x.path) for x in steps[1].arguments[0].sources] == [(0, ".items[*].id")]


def test_an_argument_no_step_gives_is_unknown(client: PmlClient) -> None:
    code = "const r = await mcp.list_items({});\nawait mcp.get_item({...opts});"
    saved = client.record(make_record("fetch an item", code, tools=["list_items", "get_item"]))
    steps = client.get_pattern(saved.pattern).steps
    assert steps[1].arguments[0].kind == r.StepArgument.KIND_UNKNOWN


def test_pml_show_prints_steps(
    server: RunningServer,
    client: PmlClient,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = _record(client)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PML_SERVER", f"127.0.0.1:{server.port}")
    with pytest.raises(SystemExit) as done:
        cli.main(["show", saved.pattern.removeprefix("patterns/")])
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    assert "search_person(query=$QUERY) independent" in out
    assert "get_person_movie_credit(person_id=#0.id) <- 0" in out
    assert 'send_message(text=#1["title"] + #2.summary, urgent=literal) <- 1, 2' in out
