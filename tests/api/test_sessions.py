"""Sessions over the public API, a real server on port 0 (docs/ranking.md, Sessions):
`ExecutionRecord.session_id` and `SuggestRequest.context` through gRPC, the score part
`transition`, and every bad field named in BadRequest."""

from __future__ import annotations

import secrets

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from pml_server._proto.pml.v1.pml_pb2 import StreamTracesRequest as Req
from pml_server._proto.pml.v1.resources_pb2 import CAPTURE_OUTCOME_SAVED
from pml_server.api.security.auth import SINGLE_TENANT
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.service import Engine
from pml_server.storage.keys import CF_CAPABILITIES, CF_SESSIONS, CF_TRANSITIONS
from testing.store_reads import rows_read
from tests.conftest import StartServer

LIST = "await mcp.list_dir({path: '.'})"
READ = "await mcp.read_file({path: 'a.json'})"


def _session(client: PmlClient, session: str) -> None:
    client.record(make_record("List the folder", LIST, tools=["list_dir"], session_id=session))
    client.record(make_record("Read the JSON file", READ, tools=["read_file"], session_id=session))


def test_a_session_lifts_what_usually_comes_next(client: PmlClient) -> None:
    for n in range(3):
        _session(client, f"conversation-{n}")
    client.record(make_record("List the folder", LIST, tools=["list_dir"], session_id="now"))
    plain = client.suggest("read the file", min_match=0.0).suggestions
    assert {s.score.transition for s in plain} == {1.0}
    lifted = client.suggest("read the file", min_match=0.0, session_id="now").suggestions
    by_tools = {tuple(s.pattern.tools_used): s.score for s in lifted}
    assert by_tools[("read_file",)].transition == pytest.approx(1 + 0.25 * 3 / 5)
    assert by_tools[("list_dir",)].transition == 1.0
    following = client.suggest("", previous_tools=["list_dir"]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["read_file"]]
    assert following[0].score.transition == pytest.approx(3 / 5)
    pattern = client.suggest("list the folder").suggestions[0].pattern.name
    after_pattern = client.suggest("", previous_patterns=[pattern]).suggestions
    assert [list(s.pattern.tools_used) for s in after_pattern] == [["read_file"]]


def test_a_blank_intent_with_a_context_asks_what_comes_next(client: PmlClient) -> None:
    """A blank intent is an empty one, as the engine reads it: with a context naming a step it
    asks what usually comes next (docs/ranking.md, Sessions), never a "must not be empty"
    about a field a context lets be empty; its length is still bounded."""
    for n in range(3):
        _session(client, f"conversation-{n}")
    empty = client.suggest("", previous_tools=["list_dir"]).suggestions
    assert [list(s.pattern.tools_used) for s in empty] == [["read_file"]]
    for blank in (" ", "\n\t "):
        following = client.suggest(blank, previous_tools=["list_dir"]).suggestions
        assert [s.pattern.name for s in following] == [s.pattern.name for s in empty]
        assert [s.score.total for s in following] == [s.score.total for s in empty]
        # without a context it is still a missing intent
        assert _violations(lambda b=blank: client.suggest(b)) == {"intent"}
    assert _violations(lambda: client.suggest(" " * 5000, previous_tools=["list_dir"])) == {
        "intent"
    }
    # a vector without an intent has nothing to read it with: it was ignored without a word
    vector = [1.0] + [0.0] * (client.server_info().embedding_dimension - 1)
    client.suggest("list the files", intent_embedding=vector)  # taken with an intent

    def vector_alone() -> object:
        return client.suggest("", intent_embedding=vector, previous_tools=["list_dir"])

    assert _violations(vector_alone) == {"intent_embedding"}


def _live(session: str, n: int, intent: str, code: str, tool: str) -> list[Req]:
    """One live execution (started, its call, finished) of `session` on a stream."""
    eid = f"{session}-{n}"
    call = resources_pb2.ToolCall(tool=tool, ok=True)
    return [
        Req(execution_id=eid, sequence=3 * n + 1, started=pml_pb2.ExecutionStarted(
            intent=intent, code=code, language="ts", session_id=session
        )),
        Req(execution_id=eid, sequence=3 * n + 2,
            tool_call_finished=pml_pb2.ToolCallFinished(tool_call=call)),
        Req(execution_id=eid, sequence=3 * n + 3, finished=pml_pb2.ExecutionFinished()),
    ]  # fmt: skip


def test_live_executions_on_a_stream_carry_their_session(client: PmlClient) -> None:
    for n in range(3):
        session = f"streamed-{n}"
        requests = _live(session, 0, "List the folder", LIST, "list_dir")
        requests += _live(session, 1, "Read the JSON file", READ, "read_file")
        acks = list(client.stream(requests))
        assert all(a.HasField("result") for a in acks), acks
    following = client.suggest("", previous_tools=["list_dir"]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["read_file"]]
    bad = _live("tab\there", 0, "List the folder", LIST, "list_dir")
    acks = list(client.stream(bad))  # (the execution's later messages are refused too)
    ack = acks[0]
    assert ack.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "started.session_id" in ack.error.message


def _violations(call: object) -> set[str]:
    assert callable(call)
    with pytest.raises(PmlClientError) as err:
        call()
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT, err.value
    return {field for field, _ in err.value.violations}


def test_bad_session_fields_are_named(client: PmlClient) -> None:
    # An invisible character (a zero-width space, a right-to-left override, a line separator)
    # made a session that looks like another: refused as in a tool name (before: only C0 and
    # C1 control characters were).
    for bad in ("x" * 129, "  ", "tab\there", "conv\u200b-1", "conv-\u202e1", "conv\u2028"):
        record = make_record("List the folder", LIST, tools=["list_dir"], session_id=bad)
        assert _violations(lambda r=record: client.record(r)) == {"record.session_id"}
        assert _violations(lambda b=bad: client.suggest("list", session_id=b)) == {
            "context.session_id"
        }
    many = ["t"] * 257
    assert _violations(lambda: client.suggest("list", previous_tools=many)) == {
        "context.previous_tools"
    }
    assert _violations(lambda: client.suggest("list", previous_tools=["ok", ""])) == {
        "context.previous_tools[1]"
    }
    # an empty intent needs a context naming a step
    assert _violations(lambda: client.suggest("")) == {"intent"}


@pytest.mark.parametrize(
    "name", ["capabilities/cap_1", "patterns/", "patterns/a/b", "patterns/\x01", "x" * 257]
)
def test_a_previous_pattern_that_is_no_pattern_name_is_named(client: PmlClient, name: str) -> None:
    """`previous_patterns` holds `patterns/{pattern}` or bare ids: anything else is a client
    mistake named by its index, not a context silently read as naming no step."""
    assert _violations(lambda: client.suggest("", previous_patterns=["pat_1", name])) == {
        "context.previous_patterns[1]"
    }


def test_an_unknown_previous_pattern_names_a_step_nothing_followed(client: PmlClient) -> None:
    _session(client, "s")
    assert not client.suggest("", previous_patterns=["patterns/pat_gone"]).suggestions
    assert not client.suggest("", previous_patterns=["pat_gone"]).suggestions
    # the bound is the id's, as in `patterns/{id}` everywhere (the prefix is not counted)
    longest = "patterns/" + "p" * 256
    assert not client.suggest("", previous_patterns=[longest]).suggestions


def test_a_session_id_holding_a_password_is_never_stored(start: StartServer) -> None:
    """A client that uses a connection URL (password included) as its session id: the session
    works (its next step is lifted) and no stored key or value holds the password
    (docs/ranking.md, Sessions: a session is kept under a digest of its id)."""
    password = "Tr0ub4dor&3-horse-" + secrets.token_hex(4)
    session = f"postgresql://admin:{password}@db.internal:5432/prod"
    server = start()
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        for n in range(2):
            _session(client, f"{session}/{n}")
        client.record(make_record("List the folder", LIST, tools=["list_dir"], session_id=session))
        lifted = client.suggest("", session_id=session).suggestions
        assert [list(s.pattern.tools_used) for s in lifted] == [["read_file"]]
    engine = server.engine
    assert isinstance(engine, Engine)
    rows = engine._state.repo.sessions.session_rows(SINGLE_TENANT)
    assert len(rows) == 3
    stored = engine._state.repo.store.scan(CF_SESSIONS, b"")
    assert stored, "the sessions' rows are where the scan looks"
    assert not [key for key, value in stored if password.encode() in key + value]


NS_LIST = "await mcp.fs.list_dir({path: '.'})"
NS_READ = "await mcp.fs.read_file({path: 'a.json'})"


@pytest.mark.parametrize(
    "previous", ["fs:list_dir", "list_dir", "mcp__fs__list_dir", "fs/list_dir"]
)
def test_previous_tools_name_a_step_with_or_without_its_namespace(
    client: PmlClient, previous: str
) -> None:
    """`previous_tools` names a tool as `available_tools` does: with or without its server's
    namespace (docs/ranking.md, Context filters, `same_tool`). Sessions recorded
    `fs:list_dir` then `fs:read_file`; an agent naming its step `list_dir` (or Claude Code's
    `mcp__fs__list_dir`) still hears what usually comes next."""
    for n in range(3):
        session = f"ns-{n}"
        client.record(
            make_record("List the folder", NS_LIST, tools=["fs:list_dir"], session_id=session)
        )
        client.record(
            make_record("Read the JSON file", NS_READ, tools=["fs:read_file"], session_id=session)
        )
    following = client.suggest("", previous_tools=[previous]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["fs:read_file"]]
    assert following[0].score.transition == pytest.approx(3 / 5)
    # another server's tool of that name is another step
    assert not client.suggest("", previous_tools=["git:list_dir"]).suggestions


@pytest.mark.parametrize(
    ("namespace", "previous"),
    [("fs", "list_dir"), ("", "fs.list_dir"), ("fs", "mcp__fs__list_dir")],
)
def test_a_workflow_teaches_its_next_step_whatever_the_namespace(
    client: PmlClient, namespace: str, previous: str
) -> None:
    """A stored workflow (no session) teaches what follows its first tool (docs/ranking.md,
    Sessions, "Workflows"), to a `previous_tools` naming that tool with or without its
    server's namespace, the other way round too (a bare stored name is any server's)."""
    call = f"mcp.{namespace}." if namespace else "mcp."
    name = f"{namespace}:" if namespace else ""
    flow = f"await {call}list_dir({{path: '.'}}); await {call}read_file({{path: 'a.json'}})"
    tools = [f"{name}list_dir", f"{name}read_file"]
    read = f"await {call}read_file({{path: 'a.json'}})"
    for intent, code, calls in (
        ("List then read", flow, tools),
        ("Read the JSON", read, tools[1:]),
    ):
        result = client.record(make_record(intent, code, tools=calls))
        assert (result.outcome, result.tool_mismatch) == (CAPTURE_OUTCOME_SAVED, False)
    following = client.suggest("", previous_tools=[previous]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [tools[1:]]


WRITE = "await mcp.write_file({path: 'a.json'})"


def test_what_comes_next_with_offered_tools_reaches_past_a_busy_capability(
    client: PmlClient,
) -> None:
    """What usually comes next, with `available_tools`: the usual next step is a capability of
    over 1024 patterns (code variants) of a tool not offered, the next usual one uses an
    offered tool. Before: the patterns of the most likely capabilities were read up to 1024
    and filtered after, so the busy capability used up the bound and the answer was empty
    although an offered follower exists. Now only the permitted patterns count (docs/ranking.md,
    Sessions, "What usually comes next")."""
    codes = ("await mcp.read_file({k" + str(n) + ": 'a.json'})" for n in range(1030))
    variants = [make_record("Read the JSON file", c, tools=["read_file"]) for c in codes]
    report = client.upload(variants)
    saved = [a.result.outcome for a in report.acks.values()]
    assert saved == [CAPTURE_OUTCOME_SAVED] * len(variants)
    for n in range(3):
        _session(client, f"reads-{n}")  # list_dir -> read_file, three times
    client.record(make_record("List the folder", LIST, tools=["list_dir"], session_id="writes"))
    write = make_record("Write the JSON file", WRITE, tools=["write_file"], session_id="writes")
    client.record(write)
    everything = client.suggest("", previous_tools=["list_dir"], k=100).suggestions
    assert {s.pattern.tools_used[0] for s in everything} == {"read_file"}
    offered = client.suggest("", previous_tools=["list_dir"], available_tools=["write_file"])
    assert [list(s.pattern.tools_used) for s in offered.suggestions] == [["write_file"]]
    # with explain: the same answer, and what the offered tools removed is listed
    explained = client.suggest(
        "", previous_tools=["list_dir"], available_tools=["write_file"], explain=True
    )
    assert [s.pattern.name for s in explained.suggestions] == [
        s.pattern.name for s in offered.suggestions
    ]
    assert explained.filtered
    assert {f.rule for f in explained.filtered} == {"available_tools"}


def test_a_step_of_many_capabilities_reads_a_bounded_number_of_transitions(
    server: RunningServer, client: PmlClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`previous_tools` naming a tool that over 1024 capabilities run alone (an agent's
    `search`, asked about many things), each followed once by reading a file. Before: every
    one of those capabilities' transitions was read, 1,091 rows here, one scan each, growing
    with the memory. Now at most `transitions_read` (1024) in all, a capability with none
    counting one (docs/ranking.md, Sessions, "The signal"); the usual next step is still
    found."""
    records = []
    for n in range(1100):
        topic = " ".join(f"w{n}x{k}q" for k in range(4))  # intents not alike: each its own
        search = "await mcp.search({q" + str(n) + ": 'x'})"
        records += [
            make_record(f"search {topic}", search, tools=["search"], session_id=f"s{n}"),
            make_record("Read the JSON file", READ, tools=["read_file"], session_id=f"s{n}"),
        ]
    report = client.upload(records)
    searches = {a.result.capability for a in report.acks.values()} - {
        report.acks[records[1].request_id].result.capability
    }
    assert len(searches) > 1024
    engine = server.engine
    assert isinstance(engine, Engine)
    read = rows_read(engine._state.repo.store, monkeypatch)
    following = client.suggest("", previous_tools=["search"]).suggestions
    assert [list(s.pattern.tools_used) for s in following] == [["read_file"]]
    assert 0 < read.get(CF_TRANSITIONS, 0) <= 1024


def test_what_comes_next_reads_a_bounded_number_of_capabilities(
    server: RunningServer, client: PmlClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workflow that lists a folder then searches teaches every capability that runs
    `search` alone (here over 2048) to follow `list_dir`; offered `read_file` only, none is
    permitted. What comes next reads at most 1024 capabilities' records looking for permitted
    patterns (docs/ranking.md, Sessions, "What usually comes next"), and as many again to say
    what the filters removed from its empty answer (Filters), not every one."""
    records = [
        make_record(
            "search " + " ".join(f"w{n}x{k}q" for k in range(4)),
            "await mcp.search({q" + str(n) + ": 'x'})",
            tools=["search"],
        )
        for n in range(2400)
    ]
    flow = "await mcp.list_dir({path: '.'}); await mcp.search({q: 'x'})"
    records.append(make_record("List then search", flow, tools=["list_dir", "search"]))
    report = client.upload(records)
    assert len({a.result.capability for a in report.acks.values()}) > 2049
    assert len(client.suggest("", previous_tools=["list_dir"], k=5).suggestions) == 5
    engine = server.engine
    assert isinstance(engine, Engine)
    read = rows_read(engine._state.repo.store, monkeypatch)
    offered = client.suggest("", previous_tools=["list_dir"], available_tools=["read_file"])
    assert not offered.suggestions
    assert (offered.removed_by_filters, list(offered.missing_tools)) == (5, ["search"])
    assert read.get(CF_CAPABILITIES, 0) <= 2 * 1024
