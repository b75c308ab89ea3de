"""The pure capture rules (no store): success, tools, signatures, redaction, recent values,
error signatures, similarity decisions, record codecs."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml_server.capture.dedup import choose_capability, near_duplicate
from pml_server.capture.normalize import NormalizedParam
from pml_server.capture.rules import (
    RECENT_VALUES_CHARS,
    REDACTED,
    CaptureLimits,
    count_failed_try,
    count_success,
    error_signature,
    push_recent,
    redacted_values,
    run_succeeded,
    same_tool,
    tool_signature,
    tools_disagree,
    tools_used,
)
from pml_server.domain.model import ExecutionRecord, ExecutionStatus, ToolCall
from pml_server.domain.records import (
    CapabilityRecord,
    FailureSignature,
    IntentRecord,
    ParamSpec,
    PatternCounters,
    PatternRecord,
    decode_intent,
)

LIMITS = CaptureLimits()


def record(*calls: ToolCall, status: ExecutionStatus = ExecutionStatus.SUCCESS) -> ExecutionRecord:
    return ExecutionRecord("r", "intent", "code", "python", tuple(calls), status)


def test_run_succeeds_only_when_status_and_every_call_succeed() -> None:
    assert run_succeeded(record(ToolCall("a"), ToolCall("b")))
    assert not run_succeeded(record(ToolCall("a"), ToolCall("b", ok=False)))
    assert not run_succeeded(record(ToolCall("a"), status=ExecutionStatus.FAILURE))


def test_tools_used_are_the_succeeded_calls_in_order() -> None:
    calls = (ToolCall("read"), ToolCall("send", ok=False), ToolCall("read"), ToolCall("write"))
    assert tools_used(record(*calls)) == ("read", "read", "write")


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=12))
def test_tool_signature_collapses_repeats_only(tools: list[str]) -> None:
    signature = tool_signature(tools)
    assert all(x != y for x, y in itertools.pairwise(signature))
    assert set(signature) == set(tools)
    assert tool_signature(signature) == signature
    assert tool_signature([t for t in tools for _ in range(2)]) == signature


def test_tool_disagreement_is_by_tool_set_and_needs_a_parse() -> None:
    assert not tools_disagree(("read", "write"), ("read", "read", "write"), parse_ok=True)
    assert tools_disagree(("read", "write"), ("read", "upload"), parse_ok=True)
    assert not tools_disagree((), ("read",), parse_ok=False)


def test_a_tool_agrees_with_itself_under_or_without_its_servers_namespace() -> None:
    # the code reads `mcp.github.create_issue(...)` as `github:create_issue`; clients report
    # `create_issue`, `mcp__github__create_issue` (Claude Code), `github/create_issue`...
    code = ("github:create_issue", "read_file")
    for run in [
        ("create_issue", "read_file"),
        ("mcp__github__create_issue", "fs__read_file"),
        ("github/create_issue", "mcp__filesystem__read_file", "read_file"),
    ]:
        assert not tools_disagree(code, run, parse_ok=True), run
    assert tools_disagree(code, ("gitlab:create_issue", "read_file"), parse_ok=True)
    assert tools_disagree(code, ("create_issue",), parse_ok=True)  # read_file did not run
    assert tools_disagree(("create_issue",), ("create_issue", "mcp__x__delete"), parse_ok=True)
    assert same_tool("mcp", "github:mcp")  # a tool named `mcp` is a tool, not a namespace
    assert not same_tool("mcp__github__x", "gitlab:x")
    assert not same_tool("issue", "github:create_issue")


@given(
    st.lists(st.sampled_from(["a", "b", "gh:a", "mcp__gh__b", "gl/a"]), max_size=4),
    st.lists(st.sampled_from(["a", "b", "gh:a", "mcp__gh__b", "gl/a"]), max_size=4),
)
def test_tool_agreement_is_symmetric_and_exact_names_always_agree(
    code: list[str], run: list[str]
) -> None:
    assert tools_disagree(code, run, parse_ok=True) == tools_disagree(run, code, parse_ok=True)
    assert not tools_disagree(code, list(reversed(code)) * 2, parse_ok=True)
    for a in code:
        for b in run:
            assert same_tool(a, b) == same_tool(b, a)


def test_secrets_are_redacted() -> None:
    params = [
        NormalizedParam("path", "string", '"a.json"', secret=False),
        NormalizedParam("token", "string", '"sk-123"', secret=True),
    ]
    assert redacted_values(params) == {"path": '"a.json"', "token": REDACTED}


@given(
    st.lists(st.dictionaries(st.sampled_from(["x", "y"]), st.text(max_size=3)), max_size=30),
    st.integers(min_value=1, max_value=6),
)
def test_recent_values_are_newest_first_unique_and_bounded(
    runs: list[dict[str, str]], bound: int
) -> None:
    recent: dict[str, list[str]] = {}
    for values in runs:
        recent = push_recent(recent, values, bound)
        for name, value in values.items():
            assert recent[name][0] == value
    for values in recent.values():
        assert len(values) <= bound
        assert len(values) == len(set(values))


def test_a_patterns_recent_values_stay_within_their_budget_keeping_each_newest() -> None:
    """64 placeholders of 1 KiB values, 40 runs, up to 1,024 values a placeholder: 2.6 MB of
    recent values (rewritten by every capture of the pattern) without the budget; within
    `RECENT_VALUES_CHARS` (256 KiB: 4 values of each) with it, the oldest dropped first and
    each placeholder's newest kept. A pattern under the budget keeps all its values."""
    recent: dict[str, list[str]] = {}
    names = [f"p{i}" for i in range(64)]
    for run in range(40):
        values = {name: json.dumps(f"{run}-{name}-" + "v" * 1000) for name in names}
        recent = push_recent(recent, values, 1024)
        assert sum(len(v) for vs in recent.values() for v in vs) <= RECENT_VALUES_CHARS
        assert all(recent[name][0] == values[name] for name in names)
    assert {len(vs) for vs in recent.values()} == {4}
    small: dict[str, list[str]] = {}
    for run in range(40):
        small = push_recent(small, {"x": f'"{run}"', "y": f'"y{run}"'}, 1024)
    assert small["x"] == [f'"{run}"' for run in reversed(range(40))]


def test_error_signature_blanks_numbers_and_quoted_values() -> None:
    a = error_signature("http_get", 'HTTP 503 after 1200 ms for "https://a"')
    b = error_signature("http_get", "HTTP 503 after 31 ms for 'https://b'")
    assert a == b
    assert a != error_signature("http_get", "connection refused")
    assert a.startswith("http_get: ")


def test_counting_success_and_failed_tries() -> None:
    now = 1_000
    ok = record(ToolCall("a"))
    counters = count_success(PatternCounters(), ok, {"p": '"1"'}, False, now, LIMITS)
    assert (counters.usage, counters.success, counters.failure) == (1, 1, 0)
    failing = record(ToolCall("a", ok=False, error="timeout 30s"))
    for i in range(3):
        counters = count_failed_try(counters, failing, {"p": '"2"'}, now + i, LIMITS)
    assert (counters.usage, counters.success, counters.failure) == (4, 1, 3)
    [signature] = counters.failure_signatures
    assert signature.count == 3
    assert signature.last_ms == now + 2
    assert signature.values_json == {"p": '"2"'}
    assert counters.last_used_ms == now + 2


def test_failure_signatures_are_bounded() -> None:
    counters = PatternCounters()
    limits = CaptureLimits(failure_signatures_per_pattern=3)
    for i in range(10):
        failing = record(ToolCall(f"tool{i}", ok=False, error="x"))
        counters = count_failed_try(counters, failing, {}, i, limits)
    assert [s.tool for s in counters.failure_signatures] == ["tool9", "tool8", "tool7"]


def test_near_duplicate_and_grouping_respect_thresholds() -> None:
    a = np.array([1.0, 0.0], dtype=np.float32)
    b = np.array([0.6, 0.8], dtype=np.float32)
    query = np.array([0.8, 0.6], dtype=np.float32)  # cosine 0.8 to a, 0.96 to b
    assert near_duplicate([a, b], query, 0.95) == 1
    assert near_duplicate([a], query, 0.95) is None
    assert near_duplicate([], query, 0.0) is None
    groups = [("cap_a", [a]), ("cap_b", [b]), ("cap_empty", [])]
    assert choose_capability(groups, query, 0.5) == "cap_b"
    assert choose_capability(groups, query, 0.97) is None


def test_records_roundtrip_through_json() -> None:
    pattern = PatternRecord(
        "pat_1",
        "sha256:x",
        "t",
        "c",
        "python",
        ("a", "b"),
        (ParamSpec("p", "string", True),),
        "{}",
        "cap_1",
        5,
        ("a",),
        True,
        True,
        "pat_2",
    )
    assert PatternRecord.from_json(pattern.to_json()) == pattern
    counters = PatternCounters(
        3, 2, 1, 9, 12.5, 2, 1, {"p": ['"1"']}, [FailureSignature("s", "a", "e", 1, 9, {})], ["x"]
    )
    assert PatternCounters.from_json(counters.to_json()) == counters
    vector = np.array([0.25, -0.5, 1e-8], dtype=np.float32)
    intent = IntentRecord(7, "pat_1", "Read", 2, 9, "model", vector)
    decoded = IntentRecord.from_json(intent.to_json())
    assert decoded.vector.tolist() == vector.tolist()
    assert decoded.str_id == "int_0000000000000007"
    capability = CapabilityRecord("cap_1", ("a",), ("pat_1",), 5)
    assert CapabilityRecord.from_json(capability.to_json()) == capability


def test_decoded_intents_are_shared_read_only_and_never_stale() -> None:
    vector = np.array([0.25, -0.5, 0.75], dtype=np.float32)
    raw = IntentRecord(7, "pat_1", "Read", 2, 9, "model", vector).to_json()
    first = decode_intent(raw)
    assert decode_intent(bytes(raw)) is first  # equal bytes from another read: one decode
    with pytest.raises(ValueError, match="read-only"):
        first.vector[0] = 1.0  # a shared record must not be changed through its vector
    bumped = decode_intent(IntentRecord(7, "pat_1", "Read", 3, 9, "model", vector).to_json())
    assert (bumped.hit_count, first.hit_count) == (3, 2)
