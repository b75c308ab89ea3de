"""Every answer fits what a default gRPC client receives (4 MiB; docs/api.md, "Answer sizes"),
with any configuration the server accepts: read over a channel with gRPC's default options, as
grpcurl, Go or Node read it, against a real server on port 0."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from pml_server import _core
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.server import RunningServer
from pml_server.config import config_of
from pml_server.domain.limits import LIMITS
from tests.conftest import StartServer

OK = resources_pb2.EXECUTION_STATUS_SUCCESS
DEFAULT_RECEIVE = 4 * 1024 * 1024  # gRPC's default max_receive_message_length
_LARGE = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]
FACE = "\U0001f600"  # four bytes of UTF-8
MOST_CODE = 1536 * 1024  # LIMITS.code_ceiling: 4 MiB less 1 MiB for the rest, halved
MOST_TOOL_CALLS = 2048  # LIMITS.tool_calls_ceiling


def _stubs(server: RunningServer) -> Iterator[tuple[pml_pb2_grpc.PmlServiceStub, ...]]:
    """A stub with gRPC's default limits (the reader under test) and one that sends large
    records (the writer)."""
    target = f"127.0.0.1:{server.port}"
    with grpc.insecure_channel(target) as default, grpc.insecure_channel(target, _LARGE) as large:
        yield pml_pb2_grpc.PmlServiceStub(default), pml_pb2_grpc.PmlServiceStub(large)


def test_max_code_bytes_past_what_getpattern_can_answer_is_refused_naming_it() -> None:
    """`max_code_bytes` went to 4 MiB: a pattern of 2.1 MB of code was a 4.2 MB GetPattern
    answer (its code and template), and of 4 MiB an 8.4 MB one, which no default client
    reads (RESOURCE_EXHAUSTED on the client, whatever it asked)."""
    for value in (MOST_CODE + 1, 2 * 1024 * 1024, _core.NORMALIZE_MAX_INPUT_BYTES):
        with pytest.raises(ValueError, match=r"engine\.max_code_bytes") as refused:
            config_of(max_code_bytes=value)
        said = str(refused.value)
        assert said.startswith(f"engine.max_code_bytes must be at most {MOST_CODE}, got {value}: ")
        assert "GetPattern answers a pattern's code and its template whole" in said
    assert config_of(max_code_bytes=MOST_CODE).engine.max_code_bytes == MOST_CODE
    assert LIMITS.code_ceiling.bound == MOST_CODE


def test_max_tool_calls_past_what_getcapability_can_answer_is_refused_naming_it() -> None:
    """`max_tool_calls` had no bound: 5,000 calls named with 1 KiB each (a 5 MB record, under
    the default 8 MiB message) made a capability whose GetCapability answer, and every
    ListCapabilities page holding it, was 5.1 MB, which no default client reads."""
    for value in (MOST_TOOL_CALLS + 1, 5000, 10**9):
        with pytest.raises(ValueError, match=r"engine\.max_tool_calls") as refused:
            config_of(max_tool_calls=value)
        said = str(refused.value)
        assert said.startswith(
            f"engine.max_tool_calls must be at most {MOST_TOOL_CALLS}, got {value}: "
        )
        assert "GetCapability answers a capability's tools" in said
    assert config_of(max_tool_calls=MOST_TOOL_CALLS).engine.max_tool_calls == MOST_TOOL_CALLS
    assert LIMITS.tool_calls_ceiling.bound == MOST_TOOL_CALLS


def test_a_capability_of_the_most_tool_calls_is_read_by_a_default_client(
    start: StartServer,
) -> None:
    """At the ceiling, 2,048 calls named with 1 KiB each: the capability, its listing page, its
    pattern and a Suggest answer naming it all arrive over a default channel."""
    server = start(max_tool_calls=MOST_TOOL_CALLS)
    tools = [f"{i:04d}{FACE * 252}" for i in range(MOST_TOOL_CALLS)]
    record = resources_pb2.ExecutionRecord(
        request_id="many-tools",
        intent="call every tool",
        code="await mcp.t0({a: 1});",
        language="javascript",
        tool_calls=[resources_pb2.ToolCall(tool=t, ok=True) for t in tools],
        status=OK,
    )
    for default, large in _stubs(server):
        saved = large.RecordExecution(pml_pb2.RecordExecutionRequest(record=record)).result
        capability = default.GetCapability(pml_pb2.GetCapabilityRequest(name=saved.capability))
        assert list(capability.capability.tools) == tools
        page = default.ListCapabilities(pml_pb2.ListCapabilitiesRequest(page_size=1000))
        assert [c.name for c in page.capabilities] == [saved.capability]
        got = default.GetPattern(pml_pb2.GetPatternRequest(name=saved.pattern)).pattern
        assert list(got.tools_used) == tools
        assert not got.truncated
        suggested = default.Suggest(pml_pb2.SuggestRequest(intent="call every tool"))
        assert suggested.suggestions[0].capability == saved.capability
        for answer in (capability, page, suggested):
            assert answer.ByteSize() <= DEFAULT_RECEIVE


def test_getpattern_at_the_largest_settings_is_read_by_a_default_client(
    start: StartServer,
) -> None:
    """Code at the most `max_code_bytes` allows and 1,024 tool calls named with 1 KiB each
    (`max_tool_calls = 1024`): the pattern was a 4.4 MB answer no default client read. Its
    code and template come whole; what does not fit is left out, `truncated` saying so."""
    server = start(max_code_bytes=MOST_CODE, max_tool_calls=1024)
    calls = "".join(f"await mcp.t{i:03d}_{'a' * 240}({{k: 'v{i}'}});\n" for i in range(256))
    head = calls + "// "
    code = head + "b" * (MOST_CODE - len(head.encode()) - 1) + "\n"
    tools = [f"{i:04d}{FACE * 252}" for i in range(1024)]
    record = resources_pb2.ExecutionRecord(
        request_id="largest",
        intent="load the largest table",
        code=code,
        language="javascript",
        tool_calls=[resources_pb2.ToolCall(tool=t, ok=True) for t in tools],
        status=OK,
    )
    for default, large in _stubs(server):
        name = large.RecordExecution(pml_pb2.RecordExecutionRequest(record=record)).result.pattern
        whole = large.GetPattern(pml_pb2.GetPatternRequest(name=name)).pattern
        answer = default.GetPattern(pml_pb2.GetPatternRequest(name=name))
        got = answer.pattern
        assert answer.ByteSize() <= DEFAULT_RECEIVE
        assert got.original_code == code
        assert got.template == _core.normalize(code, "javascript").template
        assert got.parameter_schema_json == whole.parameter_schema_json
        assert [p.name for p in got.parameters] == [p.name for p in whole.parameters]
        assert got.truncated  # what was left out: docs/api.md, "Answer sizes"
        assert list(got.tools_used) == tools[: len(got.tools_used)]
        assert len(got.tools_used) > 512


def test_a_listing_page_of_a_thousand_patterns_is_read_by_a_default_client(
    start: StartServer,
) -> None:
    """A page's items were counted without their tag and length (3 bytes each) or the page
    token: 1,000 patterns of 4,193 bytes were a 4,196,000-byte page, refused by a default
    client while its items summed to under 4 MiB."""
    server = start()

    def record(i: int, pad: int) -> resources_pb2.ExecutionRecord:
        return resources_pb2.ExecutionRecord(
            request_id=f"r{i}",
            intent=f"do thing {i:04d}",
            code=f"await mcp.t{i:04d}({{p: 'x'}});\n// {'a' * pad}\n",
            language="javascript",
            tool_calls=[resources_pb2.ToolCall(tool=f"t{i:04d}", ok=True)],
            status=OK,
        )

    for default, large in _stubs(server):
        # One pattern tells how large a listed pattern is; the thousand are made about 4,193
        # bytes each, so that a page holds all of them by their own sizes.
        probe = large.RecordExecution(pml_pb2.RecordExecutionRequest(record=record(9999, 2000)))
        listed = large.ListPatterns(pml_pb2.ListPatternsRequest()).patterns[0]
        large.DeletePattern(pml_pb2.DeletePatternRequest(name=probe.result.pattern))
        for time in [listed.create_time, listed.last_used_time]:
            time.nanos = 999_000_000  # as most take (a millisecond's nanos: 0 to 4 bytes)
        # the pad is in the code and the template: 4,193 or 4,194 bytes (a few take 3 fewer)
        pad = 2000 - (listed.ByteSize() - 4194 + 1) // 2
        for i in range(1000):
            large.RecordExecution(pml_pb2.RecordExecutionRequest(record=record(i, pad)))
        sizes, token = [], ""
        while True:
            page = default.ListPatterns(
                pml_pb2.ListPatternsRequest(page_size=1000, page_token=token)
            )
            assert page.ByteSize() <= DEFAULT_RECEIVE
            sizes += [p.ByteSize() for p in page.patterns]
            token = page.next_page_token
            if not token:
                break
        assert len(sizes) == 1000
        # the case made: the thousand fit 4 MiB by their own sizes, not with their framing
        assert sum(sizes) <= DEFAULT_RECEIVE < sum(sizes) + 3 * len(sizes)
