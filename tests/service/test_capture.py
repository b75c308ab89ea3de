"""Capture rules 1-7, one by one, through the engine on a real RocksDB store."""

from __future__ import annotations

import json
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest

from pml_server import _core
from pml_server.capture.steps import STEPS_RULES, step_views
from pml_server.domain.errors import AlreadyExistsError, InvalidArgumentError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import (
    CaptureOutcome,
    CaptureResult,
    ExecutionRecord,
    PageRequest,
    SuggestQuery,
    ToolCall,
)
from pml_server.service import Engine
from pml_server.service._idempotency import encode_result
from pml_server.storage import Repository, Store
from tests.support import Clock, files_holding, make_record, open_engine

JSON_TOOLS = ["read_file", "parse_json"]


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = open_engine(tmp_path / "db")
    yield engine
    engine.close()


def test_rule1_new_pattern_with_a_failed_tool_is_not_saved(engine: Engine) -> None:
    record = make_record(
        "r1",
        "Summarize inbox",
        ["gmail_get", "memory_search", "notion_get"],
        failed={"gmail_get", "notion_get"},
    )
    result = engine.record("t", record)
    assert result.outcome is CaptureOutcome.REJECTED
    assert [f.tool for f in result.tool_failures] == ["gmail_get", "notion_get"]
    assert engine.list_patterns("t", PageRequest()).items == ()
    stats = engine.stats("t")
    assert (stats.patterns, stats.rejected, stats.failures_logged) == (0, 1, 2)
    logged = engine.list_failures("t", PageRequest()).items
    assert {f.tool for f in logged} == {"gmail_get", "notion_get"}
    assert all(f.pattern_id == "" and f.intent == "Summarize inbox" for f in logged)


def test_rule2_failed_try_of_a_known_pattern_counts(engine: Engine) -> None:
    saved = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    failed = engine.record(
        "t", make_record("r2", "Read JSON file", JSON_TOOLS, failed={"parse_json"})
    )
    assert failed.outcome is CaptureOutcome.COUNTED
    assert failed.pattern_id == saved.pattern_id
    assert failed.tool_failures[0].tool == "parse_json"
    ok = engine.record("t", make_record("r3", "Read JSON file", JSON_TOOLS, path="b.json"))
    assert ok.outcome is CaptureOutcome.COUNTED
    pattern = engine.get_pattern("t", saved.pattern_id)
    assert (pattern.usage_count, pattern.success_count, pattern.failure_count) == (3, 2, 1)


def test_rule2_last_used_and_mean_duration_follow_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    engine = open_engine(tmp_path, clock)
    first = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, duration_ms=10))
    clock.advance_days(2)
    engine.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, duration_ms=30))
    pattern = engine.get_pattern("t", first.pattern_id)
    assert pattern.first_seen_ms == clock.now_ms - 2 * 86_400_000
    assert pattern.last_used_ms == clock.now_ms
    assert pattern.mean_duration_ms == pytest.approx(20.0)
    engine.close()


def test_rule2_huge_durations_saturate_and_survive_a_reopen(tmp_path: Path) -> None:
    # Each duration is finite, but their sum overflows; stored JSON cannot hold Infinity.
    engine = open_engine(tmp_path)
    huge = 1.5e308
    first = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, duration_ms=huge))
    engine.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, duration_ms=huge))
    engine.close()
    engine = open_engine(tmp_path)
    pattern = engine.get_pattern("t", first.pattern_id)
    assert pattern.usage_count == 2
    assert pattern.mean_duration_ms == pytest.approx(sys.float_info.max / 2)
    engine.close()


def test_rule3_new_successful_pattern_starts_at_one(engine: Engine) -> None:
    result = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert result.outcome is CaptureOutcome.SAVED
    assert result.new_pattern
    pattern = engine.get_pattern("t", result.pattern_id)
    assert (pattern.usage_count, pattern.success_count, pattern.failure_count) == (1, 1, 0)
    assert pattern.tools_used == tuple(JSON_TOOLS)
    assert pattern.original_code == make_record("x", "", JSON_TOOLS).code
    # same normalized code with other literals: one pattern (the ON CONFLICT upsert)
    again = engine.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, path="other.json"))
    assert again.pattern_id == result.pattern_id
    assert not again.new_pattern
    assert engine.stats("t").patterns == 1
    values = engine.get_pattern("t", result.pattern_id).params[0].recent_values_json
    assert values[0] == json.dumps("other.json")  # newest first


def test_rule4_tools_used_come_from_the_record_and_mismatch_is_recorded(engine: Engine) -> None:
    code = 'await mcp.read_file({path: "a.json"});\nawait mcp.write_file({path: "b.json"});'
    record = ExecutionRecord(
        request_id="r1",
        intent="Copy a file",
        code=code,
        language="javascript",
        tool_calls=(ToolCall("read_file"), ToolCall("upload_blob")),
    )
    result = engine.record("t", record)
    assert result.outcome is CaptureOutcome.SAVED
    assert result.tool_mismatch
    pattern = engine.get_pattern("t", result.pattern_id)
    assert pattern.tools_used == ("read_file", "upload_blob")
    assert pattern.tool_mismatch_count == 1


def test_rule4_a_tool_called_by_a_string_subscript_is_read_from_the_code(engine: Engine) -> None:
    # MCP tool names that are no identifiers are called as `mcp["resolve-library-id"](...)`:
    # the code names the same tools the run used, so nothing disagrees, and the steps read
    # the data flow (docs/normalization.md, Tool calls)
    code = (
        'const r = await mcp["resolve-library-id"]({libraryName: "react"});\n'
        'await mcp["get-library-docs"]({id: r.id});'
    )
    record = ExecutionRecord(
        request_id="r1",
        intent="Look up the React docs",
        code=code,
        language="javascript",
        tool_calls=(ToolCall("resolve-library-id"), ToolCall("get-library-docs")),
    )
    result = engine.record("t", record)
    assert result.outcome is CaptureOutcome.SAVED
    assert not result.tool_mismatch
    pattern = engine.get_pattern("t", result.pattern_id)
    assert pattern.tool_mismatch_count == 0
    assert [s.tool for s in pattern.steps] == ["resolve-library-id", "get-library-docs"]
    assert pattern.steps[1].depends_on == (0,)


def test_rule4_a_tool_reported_under_its_servers_namespace_agrees_with_the_code(
    engine: Engine,
) -> None:
    # the code names `github:create_issue`; Claude Code reports `mcp__github__create_issue`
    record = ExecutionRecord(
        request_id="r1",
        intent="File a bug about the login page",
        code='await mcp.github.create_issue({title: "Login broken"});',
        language="javascript",
        tool_calls=(ToolCall("mcp__github__create_issue"),),
    )
    result = engine.record("t", record)
    assert not result.tool_mismatch
    assert engine.get_pattern("t", result.pattern_id).tool_mismatch_count == 0
    other = replace(record, request_id="r2", tool_calls=(ToolCall("mcp__gitlab__create_issue"),))
    assert engine.record("t", other).tool_mismatch  # another server's tool


def test_rule3_runs_of_two_tools_through_an_sdk_client_are_two_patterns(engine: Engine) -> None:
    # The MCP SDKs' clients name the tool in an argument (`session.call_tool("get_weather",
    # ...)`): the name is code, so two tools never share a pattern, and the run agrees with its
    # code (docs/normalization.md, Tool calls)
    def run(request_id: str, tool: str) -> ExecutionRecord:
        return ExecutionRecord(
            request_id=request_id,
            intent=f"use {tool} for Paris",
            code=f'r = await session.call_tool("{tool}", {{"city": "Paris"}})',
            language="python",
            tool_calls=(ToolCall(tool),),
        )

    weather = engine.record("t", run("r1", "get_weather"))
    news = engine.record("t", run("r2", "get_news"))
    again = engine.record("t", run("r3", "get_weather"))
    assert not weather.tool_mismatch
    assert not news.tool_mismatch
    assert news.pattern_id != weather.pattern_id
    assert again.pattern_id == weather.pattern_id
    pattern = engine.get_pattern("t", weather.pattern_id)
    assert pattern.tools_used == ("get_weather",)
    assert [p.name for p in pattern.params] == ["$CITY"]
    assert [(s.tool, [a.name for a in s.arguments]) for s in pattern.steps] == [
        ("get_weather", ["city"])
    ]


def test_rule3_a_new_pattern_stores_the_steps_its_code_gives(tmp_path: Path) -> None:
    """The steps are read from the pattern's code once, when it is made, and stored with it
    (docs/normalization.md, Steps): a reopened store shows them as the code gives them."""
    code = "const a = await mcp.read_file({path: 'a.json'});\nawait mcp.parse_json({text: a.body});"
    engine = open_engine(tmp_path)
    saved = engine.record(
        "t", make_record("r1", "Parse a file", ["read_file", "parse_json"], code=code)
    )
    record = engine._state.repo.patterns.pattern("t", saved.pattern_id)
    assert record is not None
    assert json.loads(record.steps_json)[0] == STEPS_RULES
    engine.close()
    engine = open_engine(tmp_path)
    shown = engine.get_pattern("t", saved.pattern_id).steps
    engine.close()
    assert shown == step_views(_core.normalize(record.original_code, "javascript").steps)
    assert [s.depends_on for s in shown] == [(), (0,)]


def test_rule5_near_duplicate_intent_bumps_the_mapping(engine: Engine) -> None:
    first = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    engine.record("t", make_record("r2", "read json file", JSON_TOOLS))  # same words
    engine.record("t", make_record("r3", "Load configuration settings", JSON_TOOLS))
    pattern = engine.get_pattern("t", first.pattern_id)
    hits = {i.text: i.hit_count for i in pattern.intents}
    assert hits == {"Read JSON file": 2, "Load configuration settings": 1}
    assert engine.stats("t").intents == 2


@pytest.mark.model
def test_rule5_grouping_with_minilm_seed_example(tmp_path: Path) -> None:
    """The seed: three JSON-reading intents with the same tools end as one capability;
    "Write JSON file" (other tools) does not join it."""
    engine = open_engine(tmp_path, embedder="minilm")
    ids = []
    codes = {  # three different programs (three code patterns) calling the same two tools
        "Read JSON file": 'return await mcp.parse_json({text: await mcp.read_file({path: "a"})});',
        "Parse JSON from disk": (
            'const raw = await mcp.read_file({path: "b.json"});\n'
            "const data = await mcp.parse_json({text: raw});\nreturn data;"
        ),
        "Load JSON data": (
            'const text = await mcp.read_file({path: "c.json", encoding: "utf8"});\n'
            "return mcp.parse_json({text, strict: true});"
        ),
    }
    for i, (intent, code) in enumerate(codes.items()):
        record = make_record(f"r{i}", intent, ["read_file", "parse_json"], code=code)
        ids.append(engine.record("t", record))
    write = engine.record(
        "t", make_record("w", "Write JSON file", ["serialize_json", "write_file"])
    )
    assert len({r.pattern_id for r in ids}) == 3  # three code patterns...
    assert len({r.capability_id for r in ids}) == 1  # ...one capability
    assert write.capability_id != ids[0].capability_id
    capability = engine.get_capability("t", ids[0].capability_id)
    assert set(capability.intents) == {"Read JSON file", "Parse JSON from disk", "Load JSON data"}
    assert capability.usage_count == 3
    engine.close()


def test_rule5_same_tools_unrelated_intent_is_another_capability(engine: Engine) -> None:
    a = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, code="a()"))
    b = engine.record(
        "t", make_record("r2", "Deploy the kubernetes cluster", JSON_TOOLS, code="b()")
    )
    assert a.capability_id != b.capability_id


def test_rule5_a_threshold_of_zero_is_taken_not_the_default(tmp_path: Path) -> None:
    """`capability_group_threshold = 0` (join a capability of the same tools unless the
    intents point apart) was read as unset: the calibrated 0.5 decided instead, and these
    intents (cosine 0.25 with the hashing embedder) were two capabilities."""
    engine = open_engine(tmp_path, capability_group_threshold=0.0)
    try:
        a = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, code="a()"))
        b = engine.record("t", make_record("r2", "Write the CSV file", JSON_TOOLS, code="b()"))
        assert a.capability_id == b.capability_id
    finally:
        engine.close()


def test_rule6_repeated_request_id_returns_the_first_result(engine: Engine) -> None:
    record = make_record("same-id", "Read JSON file", JSON_TOOLS)
    first = engine.record("t", record)
    second = engine.record("t", record)
    assert second.replayed
    assert not first.replayed
    assert (second.pattern_id, second.outcome) == (first.pattern_id, first.outcome)
    # the same id with another execution is refused, never answered `replayed` and dropped
    for other in (
        make_record("same-id", "Anything", ["x"], code="other()"),
        make_record("same-id", "Read JSON file", JSON_TOOLS, failed={JSON_TOOLS[0]}),
        replace(record, intent="Read the JSON file"),
    ):
        with pytest.raises(AlreadyExistsError, match="request_id 'same-id' was already used"):
            engine.record("t", other)
        assert isinstance(engine.record_many("t", [other])[0], AlreadyExistsError)
    # within one batch too: the first applies, the other is refused
    batch = engine.record_many(
        "t", [make_record("b-id", "Write it", ["w"]), make_record("b-id", "Other", ["o"])]
    )
    assert isinstance(batch[0], CaptureResult)
    assert isinstance(batch[1], AlreadyExistsError)
    assert engine.get_pattern("t", first.pattern_id).usage_count == 1
    assert engine.stats("t").executions == 2  # same-id once, b-id once
    # request ids are per tenant
    assert not engine.record("u", record).replayed


def test_a_captured_request_ids_answer_is_read_without_capturing(engine: Engine) -> None:
    """`captured_answer` (OTLP asks it for a root exported again with only calls that ended
    after it: docs/capture.md, "Spans arriving after their run was mapped"): the stored answer
    as a replay, whatever execution would ask; None for an id never applied or of another
    tenant; the pattern gone, none named. Nothing is counted."""
    assert engine.captured_answer("t", "run-1") is None
    first = engine.record("t", make_record("run-1", "Read JSON file", JSON_TOOLS))
    answer = engine.captured_answer("t", "run-1")
    assert answer == replace(first, replayed=True)
    assert engine.captured_answer("u", "run-1") is None
    assert engine.get_pattern("t", first.pattern_id).usage_count == 1
    engine.delete_pattern("t", first.pattern_id)
    gone = engine.captured_answer("t", "run-1")
    assert gone is not None
    assert (gone.pattern_id, gone.capability_id, gone.replayed) == ("", "", True)


def test_rule7_failure_log_is_bounded_and_paged_newest_first(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, failure_log_size=5)
    for i in range(8):
        engine.record(
            "t", make_record(f"r{i}", f"Task {i}", ["tool"], failed={"tool"}, code=f"c{i}()")
        )
    first = engine.list_failures("t", PageRequest(page_size=3))
    second = engine.list_failures("t", PageRequest(page_size=3, cursor=first.next_cursor))
    ids = [f.request_id for f in first.items + second.items]
    assert ids == ["r7", "r6", "r5", "r4", "r3"]
    assert second.next_cursor == ""
    assert engine.stats("t").failures_logged == 8
    assert engine.list_failures("other", PageRequest()).items == ()
    with pytest.raises(InvalidArgumentError, match="page_token"):
        engine.list_failures("t", PageRequest(cursor="garbage"))
    engine.close()


def test_rule7_failed_try_records_redacted_values_and_error_signature(engine: Engine) -> None:
    def record(rid: str, token: str, failed: bool) -> ExecutionRecord:
        code = f'await mcp.http_get({{url: "https://x", token: "{token}"}});'
        call = ToolCall("http_get", ok=not failed, error="HTTP 503 after 1200 ms" if failed else "")
        return ExecutionRecord(rid, "Fetch page", code, "javascript", (call,))

    saved = engine.record("t", record("r1", "sk-one", failed=False))
    engine.record("t", record("r2", "sk-two", failed=True))
    engine.record("t", record("r3", "sk-three", failed=True))
    pattern = engine.get_pattern("t", saved.pattern_id)
    assert pattern.failure_count == 2
    token_param = next(p for p in pattern.params if p.secret)
    assert set(token_param.recent_values_json) == {'"[REDACTED]"'}
    assert "sk-one" not in json.dumps([p.recent_values_json for p in pattern.params])


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (make_record("r", "", ["a"]), "intent"),
        (make_record("r", "x", ["a"], code="  "), "code"),
        (make_record("r", "x", ["a"], code="x" * (256 * 1024 + 1)), "code"),
        (make_record("", "x", ["a"]), "request_id"),
        (make_record("r", "x", ["a", "", "b", " "]), "tool_calls[1].tool"),
        (make_record("r", "x", ["t"] * 257), "tool_calls"),
    ],
)
def test_invalid_records_name_the_field(
    engine: Engine, record: ExecutionRecord, field: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        engine.record("t", record)
    assert field in [v.field for v in caught.value.violations]


def test_client_vector_of_wrong_dimension_is_refused(engine: Engine) -> None:
    from dataclasses import replace

    record = replace(make_record("r", "x", ["a"]), intent_embedding=(1.0, 2.0))
    with pytest.raises(InvalidArgumentError) as caught:
        engine.record("t", record)
    assert caught.value.violations[0].field == "intent_embedding"
    good = replace(record, intent_embedding=tuple([1.0] * engine.embedding_dim()))
    assert engine.record("t", good).outcome is CaptureOutcome.SAVED


def test_rule6_request_ids_expire_after_their_ttl(tmp_path: Path) -> None:
    clock = Clock()
    engine = open_engine(tmp_path, clock, request_id_ttl_days=1.0)
    record = make_record("r1", "Read JSON file", JSON_TOOLS)
    first = engine.record("t", record)
    clock.advance_days(0.5)
    engine.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))
    clock.advance_days(0.75)  # r1 is 1.25 days old, r2 0.75
    assert engine.admin.prune_request_ids("t") == 1
    assert engine.record("t", make_record("r2", "Read JSON file", JSON_TOOLS)).replayed
    again = engine.record("t", record)
    assert not again.replayed  # forgotten: counted as a new run
    assert engine.get_pattern("t", first.pattern_id).usage_count == 3
    engine.close()


def test_pruning_request_ids_reads_a_page_at_a_time(tmp_path: Path) -> None:
    """Before: the tenant's every stored answer was read into memory at once (a week of
    captures at the default TTL): 40,000 answers of 9.4 MB peaked at 16 MB of Python objects;
    read a page at a time, under 1 MB."""
    clock = Clock()
    engine = open_engine(tmp_path, clock, request_id_ttl_days=1.0)
    first = engine.record("t", make_record("kept", "Read JSON file", JSON_TOOLS))
    engine.close()
    store = Store(tmp_path)  # the answers of 40,000 earlier captures, as a capture stores them
    requests = Repository(store).requests
    answer = encode_result(first, clock.now_ms - 2 * 86_400_000, "0" * 32)
    stored = 0
    for block in range(40):
        rows = [requests.put_request_result("t", f"old-{block}-{i}", answer) for i in range(1000)]
        stored += sum(len(key) + len(value) for _, key, value in rows if value is not None)
        store.write(rows)
    store.close()
    engine = open_engine(tmp_path, clock, request_id_ttl_days=1.0)
    # the open's free-text pass reads these answers too, a page at a time in its own thread:
    # over before the prune is measured, or its pages count in the prune's peak
    engine.admin.wait_free_text_redacted(60)
    tracemalloc.start()
    try:
        pruned = engine.admin.prune_request_ids("t")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pruned == 40_000
    assert peak < stored / 5, (peak, stored)
    assert engine.record("t", make_record("kept", "Read JSON file", JSON_TOOLS)).replayed
    assert engine.admin.prune_request_ids("t") == 0
    engine.close()


def test_closed_engine_refuses_captures_as_unavailable(tmp_path: Path) -> None:
    from pml_server.domain.errors import UnavailableError

    engine = open_engine(tmp_path)
    engine.close()
    engine.close()  # harmless
    with pytest.raises(UnavailableError):
        engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))


def test_rule6_concurrent_retries_of_one_request_count_once(engine: Engine) -> None:
    import threading

    record = make_record("retry-me", "Read JSON file", JSON_TOOLS)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(engine.record("t", record)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.replayed for r in results) == [False] + [True] * 7
    assert len({r.pattern_id for r in results}) == 1
    assert engine.stats("t").executions == 1


def test_a_url_query_token_in_a_tool_name_or_tag_is_stored_redacted(engine: Engine) -> None:
    """A tool named by a URL with `?access_token=...` and a tag with `&token=...` were stored as
    given: names lost only a URL's user-info password, not the query token the core's free-text
    rule redacts. Now both lose the token's value (the core's one URL rule), and a name that
    merely looks random (a commit hash) is kept."""
    url = "https://api.example.com/tools/run?access_token=abcdef123456&page=2"
    hashed = "tool_a8f9e0b1c2d3e4f5a6b7c8d9"
    record = ExecutionRecord(
        request_id="r1",
        intent="call the internal tool",
        code="await mcp.internal_tool({q: 1});\nawait mcp.other_tool({q: 2});",
        language="javascript",
        tool_calls=(
            ToolCall(url, arguments_json="{}"),
            ToolCall(hashed, arguments_json="{}", ok=False, error="timeout"),
        ),
        tags=("src=https://h/x?page=1&token=abcdef123456", "commit:a94a8fe5ccb19ba61c4c0873d391e9"),
    )
    engine.record("t", record)
    redacted = "https://api.example.com/tools/run?access_token=[REDACTED]&page=2"
    (failure,) = engine.list_failures("t", PageRequest()).items
    assert failure.tool == hashed
    one = "await mcp.internal_tool({q: 1});"
    ok = replace(
        record, request_id="r2", code=one, tool_calls=(ToolCall(url, arguments_json="{}"),)
    )
    saved = engine.record("t", ok)
    pattern = engine.get_pattern("t", saved.pattern_id)
    assert pattern.tools_used == (redacted,)
    assert "abcdef123456" not in repr(pattern)
    tags = ("src=https://h/x?page=1&token=[REDACTED]",)
    found = engine.suggest("t", SuggestQuery(intent="call the internal tool", tags=tags))
    assert [s.pattern.id for s in found.suggestions] == [saved.pattern_id]


def test_a_patterns_tags_are_kept_when_later_runs_bring_more_than_it_holds(
    engine: Engine,
) -> None:
    """A pattern holds at most `LIMITS.tags.bound` tags. It kept the alphabetically first of
    all it had seen: a run tagged with 32 others that sort earlier silently removed "team",
    which its first run carried, and every later run tagged "team" too (it sorts out again),
    so a Suggest filtered on "team" stopped finding the pattern. Now a tag a pattern has stays;
    new ones join while there is room."""
    bound = LIMITS.tags.bound
    engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, tags=("team",)))
    others = tuple(f"a{n:02d}" for n in range(bound))
    engine.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, tags=others))
    engine.record("t", make_record("r3", "Read JSON file", JSON_TOOLS, tags=("team", "zeta")))
    query = SuggestQuery(intent="Read JSON file", tags=("team",))
    (found,) = engine.suggest("t", query).suggestions
    assert found.pattern.usage_count == 3
    # the first runs' tags filled it: a00 .. a30 joined, then there was no room
    for tags, expected in ((others[: bound - 1], 1), ((others[-1],), 0), (("zeta",), 0)):
        query = SuggestQuery(intent="Read JSON file", tags=tags)
        assert len(engine.suggest("t", query).suggestions) == expected, tags


def test_a_jdbc_password_in_a_credentials_pair_reaches_no_file_of_the_store(
    tmp_path: Path,
) -> None:
    """`jaydebeapi.connect(driver, url, ["bob", "..."])` and JDBC's `getConnection(url, user,
    "...")`: the password is a secret parameter, so no stored row holds it (the code, the
    counters' recent values, the failure log, the stored answers), nor any file of the store
    (docs/capture.md, What is never stored)."""
    secrets = ("hunter2corral", "hunter3corral", "zebra9corral")
    jdbc = 'c = jaydebeapi.connect("org.h2.Driver", "jdbc:h2:tcp://h/~/t", ["bob", "{}"])'
    js = 'const c = DriverManager.getConnection("jdbc:h2:mem:x", "bob", "{}");'
    engine = open_engine(tmp_path / "e")
    try:
        runs = [(jdbc, "python"), (jdbc, "python"), (js, "javascript")]
        for i, ((code, language), secret) in enumerate(zip(runs, secrets, strict=True)):
            run = replace(
                make_record(f"r{i}", "open the h2 database", ["query"], code=code),
                code=code.replace("{}", secret),
                language=language,
            )
            engine.record("t", run)
        failed = make_record("r9", "open the h2 database", ["query"], failed={"query"})
        engine.record("t", replace(failed, code=jdbc.replace("{}", secrets[0])))
        assert engine.stats("t").patterns == 2
    finally:
        engine.close()
    for secret in secrets:
        assert files_holding(tmp_path / "e", secret) == [], secret
