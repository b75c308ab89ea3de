"""Valid but hostile input against a real server process: requests every limit allows, built to
make one caller's records, calls or streams cost everybody else. Each test is one finding of
issue 18 that failed on main before the fix:

- giant patterns (120,000 literals in 240 KB of code) made Suggest and ListPatterns fail for
  the whole tenant (answers over gRPC's 32 MiB send limit);
- a secret literal was redacted in the parameters but kept in `original_code`, error texts...;
- single-tenant, 16 idle streams took every call slot: unary calls were refused;
- live tool-call arguments were checked only when the execution finished, and buffered;
- a tenant's expensive calls took its neighbour's Suggest 44x: nothing made them give way;
- smaller: float32 norm overflow, live error field names, reused stream execution ids,
  replays of deleted patterns, upload retries without backoff, unauthenticated calls refused
  on the RPC threads.

Figures (pattern sizes, answer sizes, secret bytes found on disk, server memory) go to
`tests/reliability/figures/`; the expensive-tenant and unauthenticated-flood figures are
timings, so they are reported, not asserted.
"""

from __future__ import annotations

import json
import random
import secrets
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.security.auth import Role, add_key
from pml_server.client import PmlClient, backoff_seconds, make_record
from testing import cost_measure
from testing.cost_measure import GIANT_LITERALS
from testing.server_process import ServerProcess
from tests.reliability.report import report

OK = resources_pb2.EXECUTION_STATUS_SUCCESS
ANSWER_BUDGET = 4 * 1024 * 1024 + 64 * 1024  # api/admission/budget.py: RESPONSE_BYTES + one pattern
_giant_record = cost_measure.giant_record
_plain_record = cost_measure.plain_record


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _peak_rss(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _ack_fields(ack: pml_pb2.StreamTracesResponse) -> list[str]:
    from google.rpc import error_details_pb2

    fields = []
    for detail in ack.error.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
    return fields


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("valid") / "data", "--durability", "fast")
    process.start()
    yield process
    assert process.proc is not None
    assert process.proc.poll() is None, process.log_tail()
    process.terminate()


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[pml_pb2_grpc.PmlServiceStub]:
    options = [
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ]
    with grpc.insecure_channel(server.target, options=options) as channel:
        yield pml_pb2_grpc.PmlServiceStub(channel)


def _stream_of(*messages: pml_pb2.StreamTracesRequest) -> Iterator[pml_pb2.StreamTracesRequest]:
    yield from messages


def test_live_arguments_are_checked_as_they_arrive(
    server: ServerProcess, stub: pml_pb2_grpc.PmlServiceStub
) -> None:
    """40 tool calls of 7 MiB arguments each on one live execution (the limit is 64 KiB): each
    is refused as it arrives and never buffered (it once grew the server by 357 MB), and the
    error names the event's own field."""
    big = resources_pb2.ToolCall(tool="t", ok=True, arguments_json=json.dumps("a" * (7 << 20)))

    def messages(eid: str, count: int) -> Iterator[pml_pb2.StreamTracesRequest]:
        yield pml_pb2.StreamTracesRequest(
            execution_id=eid,
            sequence=1,
            started=pml_pb2.ExecutionStarted(
                intent="write a big file", code="await mcp.t({a: 1})", language="javascript"
            ),
        )
        for i in range(count):
            yield pml_pb2.StreamTracesRequest(
                execution_id=eid,
                sequence=2 + i,
                tool_call_finished=pml_pb2.ToolCallFinished(tool_call=big),
            )
        yield pml_pb2.StreamTracesRequest(
            execution_id=eid, sequence=1000, finished=pml_pb2.ExecutionFinished(status=OK)
        )

    # a few first: what receiving one such message costs at all (gRPC's buffers, the decode)
    list(stub.StreamTraces(messages("warm-up", 4), timeout=300))
    before = _peak_rss(server)
    acks = list(stub.StreamTraces(messages("live-big", 40), timeout=300))
    growth = _peak_rss(server) - before
    summary = report(
        "hostile_valid_live_arguments",
        {"messages": 40, "mib_each": 7, "peak_rss_growth_mib": round(growth / 2**20, 1)},
    )
    assert len(acks) == 1, summary
    assert acks[0].HasField("error"), summary
    assert _ack_fields(acks[0]) == ["tool_call_finished.tool_call.arguments_json"], summary
    # buffered, 40 calls were 280 MiB; refused as they arrive, 35-51 MiB on an idle machine
    # and 74 MiB under a loaded CI run (gRPC's receive buffers fill while the handler waits)
    assert growth < 128 << 20, summary


def test_a_stream_cannot_buffer_past_its_byte_budget(stub: pml_pb2_grpc.PmlServiceStub) -> None:
    """Open live executions of valid tool calls (64 KiB arguments, 256 each) stop at the
    stream's 32 MiB budget: RESOURCE_EXHAUSTED, where 1,024 x 256 x 64 KiB could buffer."""
    call = resources_pb2.ToolCall(tool="t", ok=True, arguments_json=json.dumps("b" * 60_000))

    def messages() -> Iterator[pml_pb2.StreamTracesRequest]:
        seq = 0
        for e in range(4):
            seq += 1
            yield pml_pb2.StreamTracesRequest(
                execution_id=f"open-{e}",
                sequence=seq,
                started=pml_pb2.ExecutionStarted(
                    intent="copy", code="await mcp.t({a: 1})", language="javascript"
                ),
            )
            for _ in range(256):
                seq += 1
                yield pml_pb2.StreamTracesRequest(
                    execution_id=f"open-{e}",
                    sequence=seq,
                    tool_call_finished=pml_pb2.ToolCallFinished(tool_call=call),
                )

    with pytest.raises(grpc.RpcError) as caught:
        list(stub.StreamTraces(messages(), timeout=300))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value.details()


def test_giant_patterns_are_bounded_and_never_break_answers(
    stub: pml_pb2_grpc.PmlServiceStub,
) -> None:
    """Five records of 120,000 literals each (240 KB of code) beside an ordinary pattern: the
    ordinary one is still suggested and every listing page arrives; a giant pattern keeps at
    most 256 parameters and a template about the size of its code."""
    stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=_plain_record("plain-1")))
    sizes = []
    for i in range(5):
        record = _giant_record(i)
        reply = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record), timeout=120)
        pattern = stub.GetPattern(
            pml_pb2.GetPatternRequest(name=reply.result.pattern), timeout=60
        ).pattern
        sizes.append(pattern.ByteSize())
        assert len(pattern.parameters) <= 256
        assert len(pattern.template.encode()) <= len(record.code.encode()) + 16 * 1024
        assert not pattern.truncated  # GetPattern returns the whole pattern
        assert pattern.original_code == record.code
    plain = stub.Suggest(pml_pb2.SuggestRequest(intent="read the JSON config file"), timeout=60)
    assert any(s.pattern.tools_used == ["read_file"] for s in plain.suggestions), plain
    giant = stub.Suggest(
        pml_pb2.SuggestRequest(intent="load the giant table", page_size=100), timeout=60
    )
    pages, listed, biggest_page, token = 0, 0, 0, ""
    while True:
        page = stub.ListPatterns(
            pml_pb2.ListPatternsRequest(page_size=1000, page_token=token), timeout=60
        )
        pages += 1
        listed += len(page.patterns)
        biggest_page = max(biggest_page, page.ByteSize())
        token = page.next_page_token
        if not token:
            break
    summary = report(
        "hostile_valid_giant_patterns",
        {
            "records": 5,
            "literals_each": GIANT_LITERALS,
            "code_kb_each": round(len(_giant_record(0).code) / 1000),
            "largest_pattern_kb": round(max(sizes) / 1000, 1),
            "suggest_answer_kb": round(giant.ByteSize() / 1000, 1),
            "list_pages": pages,
            "largest_list_page_kb": round(biggest_page / 1000, 1),
        },
    )
    assert listed == 6, summary
    assert giant.ByteSize() <= ANSWER_BUDGET, summary
    assert biggest_page <= ANSWER_BUDGET, summary
    assert max(sizes) < 1_000_000, summary


def test_an_overflowing_float32_norm_is_a_valid_vector(
    stub: pml_pb2_grpc.PmlServiceStub,
) -> None:
    """[1e20] * dim is finite in float32, only its squared norm is not: a direction, accepted."""
    dim = stub.GetServerInfo(pml_pb2.GetServerInfoRequest()).embedding_dimension
    record = _plain_record("huge-norm")
    record.intent_embedding.extend([1e20] * dim)
    reply = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record), timeout=60)
    assert reply.result.pattern


def test_a_reused_stream_execution_id_is_refused(stub: pml_pb2_grpc.PmlServiceStub) -> None:
    """Another record under an execution id already used on the stream is an error, not a
    silent `replayed` (its request id defaulted to the execution id); the same one resent is
    a replay."""
    first = _plain_record("")
    other = _plain_record("")
    other.code = "await mcp.write_file({path: 'out.json'})"
    other.tool_calls[0].tool = "write_file"
    eid = f"reused-{random.getrandbits(32)}"
    acks = list(
        stub.StreamTraces(
            _stream_of(
                pml_pb2.StreamTracesRequest(execution_id=eid, sequence=1, record=first),
                pml_pb2.StreamTracesRequest(execution_id=eid, sequence=2, record=first),
                pml_pb2.StreamTracesRequest(execution_id=eid, sequence=3, record=other),
            ),
            timeout=60,
        )
    )
    by_seq = {a.sequence: a for a in acks}
    assert by_seq[1].HasField("result"), acks
    assert by_seq[2].result.replayed, acks
    assert by_seq[3].HasField("error"), by_seq[3]
    assert _ack_fields(by_seq[3]) == ["execution_id"], by_seq[3]


def test_huge_execution_ids_are_refused_and_never_held(tmp_path: Path) -> None:
    """A stream remembers its execution ids (to tell a resend from a reused id): 100 records
    with explicit request ids under 4 MB execution ids were each captured, and the stream held
    every id: 400 MB more server memory from one stream, up to 64k ids. Now each is refused
    alone naming `execution_id`; the stream goes on and captures the next record."""
    process = ServerProcess(tmp_path / "data", "--durability", "fast")
    process.start()
    try:
        before = _peak_rss(process)
        record = _plain_record("")

        def messages() -> Iterator[pml_pb2.StreamTracesRequest]:
            for i in range(100):
                record.request_id = f"huge-eid-{i}"
                yield pml_pb2.StreamTracesRequest(
                    execution_id=f"{i}-" + "e" * 4_000_000, sequence=i + 1, record=record
                )
            record.request_id = "after-huge-eids"
            yield pml_pb2.StreamTracesRequest(execution_id="fine", sequence=101, record=record)

        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        with grpc.insecure_channel(process.target, options=options) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            acks = {a.sequence: a for a in stub.StreamTraces(messages(), timeout=120)}
        growth = _peak_rss(process) - before
    finally:
        process.terminate()
    assert len(acks) == 101
    for sequence in range(1, 101):
        assert _ack_fields(acks[sequence]) == ["execution_id"], acks[sequence].error.message
    assert acks[101].HasField("result"), acks[101]
    assert growth < 250 * 1024 * 1024, growth


def test_an_id_reused_for_another_execution_is_refused_never_dropped(
    stub: pml_pb2_grpc.PmlServiceStub,
) -> None:
    """Two streams each send a different execution as the same execution id with no request id
    (so both default to it), and a unary request id is reused with another record: each reuse
    is refused with ALREADY_EXISTS naming `request_id`, never answered `replayed` while its
    record is dropped; the same execution resent is still a replay, counted once."""
    first = _plain_record("")
    other = _plain_record("")
    other.code = "await mcp.write_file({path: 'out.json'})"
    other.tool_calls[0].tool = "write_file"
    eid = f"shared-{random.getrandbits(32)}"
    acks = []
    for record in (first, other, first):  # three streams, one after the other
        request = pml_pb2.StreamTracesRequest(execution_id=eid, sequence=1, record=record)
        acks += list(stub.StreamTraces(_stream_of(request), timeout=60))
    assert acks[0].HasField("result"), acks
    assert not acks[0].result.replayed, acks
    assert acks[1].HasField("error"), acks[1]
    assert acks[1].error.code == grpc.StatusCode.ALREADY_EXISTS.value[0], acks[1]
    assert "request_id" in acks[1].error.message, acks[1]
    assert acks[2].result.replayed, acks[2]
    unary = _plain_record("")
    unary.request_id = f"unary-{random.getrandbits(32)}"
    stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=unary))
    unary.intent = "an entirely different request"
    with pytest.raises(grpc.RpcError) as refused:
        stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=unary))
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert repr(unary.request_id) in (refused.value.details() or "")


def test_a_replay_of_a_deleted_pattern_names_no_pattern(
    stub: pml_pb2_grpc.PmlServiceStub,
) -> None:
    record = _plain_record("")
    record.request_id = f"deleted-{random.getrandbits(32)}"
    record.code = "await mcp.archive_logs({days: 30})"
    record.tool_calls[0].tool = "archive_logs"
    first = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record)).result
    assert first.pattern
    stub.DeletePattern(pml_pb2.DeletePatternRequest(name=first.pattern))
    again = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record)).result
    assert again.replayed
    assert again.pattern == "", again
    assert again.capability == "", again


# ---- secrets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["api key", "password in a URL"])
def test_a_secret_is_found_nowhere_on_disk(tmp_path: Path, kind: str) -> None:
    """A credential in the code (a literal and a comment), the intent, tool arguments, error
    texts and the trace of successes, failed tries, rejected patterns and live executions: after
    capture, no byte of the data directory holds it, and no answer does. A marker sent in the
    same fields is found on disk, so the search can see what was written (the server is
    SIGKILLed: the write-ahead log holds every record uncompressed). The credential is an API
    key, or the password of a connection URL (`postgresql://admin:PASSWORD@db...`, where the
    password has characters no token rule reads as one word)."""
    if kind == "api key":
        secret = "sk-live-" + secrets.token_hex(12)
        credential = secret
    else:
        secret = "Tr0ub4dor&3-horse-" + secrets.token_hex(4)
        credential = f"postgresql://admin:{secret}@db.internal:5432/prod"
    marker = "marker" + secrets.token_hex(5)
    data = tmp_path / "data"
    process = ServerProcess(data, "--durability", "sync")
    process.start()
    code = (
        f"// fallback key {credential} ({marker})\n"
        f"const key = '{credential}'\n"
        f"await mcp.call_api({{dsn: '{credential}', apiKey: key, note: '{marker}'}})"
    )
    args = json.dumps({"apiKey": credential, "note": marker})
    ok = resources_pb2.ToolCall(tool="call_api", ok=True, arguments_json=args)
    failed = resources_pb2.ToolCall(
        tool="call_api", ok=False, arguments_json=args, error=f"401 for {credential} ({marker})"
    )
    intent = f"call the api with {credential} ({marker})"
    trace = f"GET /v1?key={credential}&note={marker}".encode()
    records = [
        resources_pb2.ExecutionRecord(
            request_id="s1", intent=intent, code=code, language="javascript",
            tool_calls=[ok], status=OK, trace=trace,
        ),
        resources_pb2.ExecutionRecord(
            request_id="s2", intent=intent, code=code, language="javascript",
            tool_calls=[failed], status=resources_pb2.EXECUTION_STATUS_FAILURE, trace=trace,
        ),
        resources_pb2.ExecutionRecord(
            request_id="s3", intent=intent, code=code.replace("call_api", "other_api"),
            language="javascript", tool_calls=[failed],
            status=resources_pb2.EXECUTION_STATUS_FAILURE,
        ),
    ]  # fmt: skip
    answers: list[bytes] = []
    try:
        with grpc.insecure_channel(process.target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            for record in records:
                reply = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record))
                answers.append(reply.SerializeToString())
            live = [
                pml_pb2.StreamTracesRequest(
                    execution_id="live-secret",
                    sequence=1,
                    started=pml_pb2.ExecutionStarted(
                        intent=intent, code=code.replace("call_api", "live_api"),
                        language="javascript",
                    ),
                ),
                pml_pb2.StreamTracesRequest(
                    execution_id="live-secret", sequence=2,
                    tool_call_finished=pml_pb2.ToolCallFinished(tool_call=ok),
                ),
                pml_pb2.StreamTracesRequest(
                    execution_id="live-secret", sequence=3,
                    finished=pml_pb2.ExecutionFinished(status=OK, trace=trace),
                ),
            ]  # fmt: skip
            answers += [a.SerializeToString() for a in stub.StreamTraces(iter(live))]
            answers.append(
                stub.Suggest(pml_pb2.SuggestRequest(intent="call the api")).SerializeToString()
            )
            answers.append(stub.ListPatterns(pml_pb2.ListPatternsRequest()).SerializeToString())
            answers.append(stub.ListFailures(pml_pb2.ListFailuresRequest()).SerializeToString())
    finally:
        process.kill()
    found_secret = found_marker = files = 0
    for path in data.rglob("*"):
        if path.is_file():
            files += 1
            raw = path.read_bytes()
            found_secret += raw.count(secret.encode())
            found_marker += raw.count(marker.encode())
    in_answers = sum(a.count(secret.encode()) for a in answers)
    summary = report(
        "hostile_valid_secrets",
        {
            "files_searched": files,
            "secret_bytes_found_on_disk": found_secret * len(secret),
            "marker_copies_found_on_disk": found_marker,
            "secret_in_answers": in_answers,
        },
    )
    assert found_marker > 0, summary
    assert found_secret == 0, summary
    assert in_answers == 0, summary


def _copies_on_disk(data: Path, text: str) -> int:
    """How many times `text` stands in the files under `data` (the store, its logs)."""
    return sum(p.read_bytes().count(text.encode()) for p in data.rglob("*") if p.is_file())


def test_a_url_password_in_a_tool_name_or_tag_is_stored_nowhere(tmp_path: Path) -> None:
    """Names were not redacted: a tool named by a URL with its password, and a tag holding a
    connection URL, were stored as given (`tools_used`, the failure log, the pattern's tags: on
    disk and in every answer naming them). Now the password is redacted there too; the rest of
    the name is kept (the marker beside it is found on disk, so the search sees the field)."""
    secret = "Tr0ub&3-" + secrets.token_hex(4)
    marker = "mk" + secrets.token_hex(4)
    tool = f"https://admin:{secret}@tools.internal/{marker}"
    tag = f"db=pg://admin:{secret}@db/{marker}"  # a tag is at most 64 characters
    data = tmp_path / "data"
    process = ServerProcess(data, "--durability", "sync")
    process.start()
    answers: list[bytes] = []
    try:
        with grpc.insecure_channel(process.target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            for i, ok in enumerate((True, True, False)):
                call = resources_pb2.ToolCall(tool=tool, ok=ok, error="" if ok else "timeout")
                record = resources_pb2.ExecutionRecord(
                    request_id=f"named-{i}", intent="call the internal tool",
                    code="await mcp.internal_tool({q: 1})", language="javascript",
                    tool_calls=[call], tags=[tag],
                )  # fmt: skip
                reply = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record))
                answers.append(reply.SerializeToString())
            name = pml_pb2.GetPatternRequest(name=reply.result.pattern)
            answers.append(stub.GetPattern(name).SerializeToString())
            answers.append(stub.ListFailures(pml_pb2.ListFailuresRequest()).SerializeToString())
            answers.append(
                stub.Suggest(
                    pml_pb2.SuggestRequest(intent="call the internal tool")
                ).SerializeToString()
            )
    finally:
        process.kill()
    assert _copies_on_disk(data, marker) > 0
    assert _copies_on_disk(data, secret) == 0
    assert not any(secret.encode() in a for a in answers)
    assert any(b"https://[REDACTED]@tools.internal/" in a for a in answers)


def test_a_url_password_in_a_tool_name_the_code_calls_is_stored_nowhere(tmp_path: Path) -> None:
    """The tools the code calls by name (`mcp["https://admin:PASSWORD@host/..."](...)`, or an
    OTLP tool span named so, whose run's code is written that way) were stored as read
    (`code_tools`), the password with them, while the code and the template had it redacted;
    and the run was flagged `tool_mismatch` against its own redacted tool. Now the names read
    from the code lose a URL's credentials as the run's tools do."""
    secret = "Tr0ub&3-" + secrets.token_hex(4)
    marker = "mk" + secrets.token_hex(4)
    tool = f"https://admin:{secret}@tools.internal/{marker}"
    data = tmp_path / "data"
    process = ServerProcess(data, "--durability", "sync")
    process.start()
    try:
        with grpc.insecure_channel(process.target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            record = resources_pb2.ExecutionRecord(
                request_id="called", intent="call the internal tool",
                code=f'await mcp["{tool}"]({{q: 1}})', language="javascript",
                tool_calls=[resources_pb2.ToolCall(tool=tool, ok=True)],
            )  # fmt: skip
            reply = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record))
    finally:
        process.kill()
    assert _copies_on_disk(data, marker) > 0
    assert _copies_on_disk(data, secret) == 0
    assert reply.result.new_pattern
    assert not reply.result.tool_mismatch


def test_credentials_the_redaction_did_not_follow_are_stored_nowhere(tmp_path: Path) -> None:
    """A hostile pass's leaks, each sent through RecordExecution (a success and a failed try)
    with its own secret: code giving a JDBC `[user, password]` list through a variable, a
    password set by `setattr`, an API key as an environment lookup's default; an intent, an
    error and arguments quoting a JSON body inside a JSON string, a template literal's value
    and a jaydebeapi call; a tag written as a JSON object. Each was found on disk (the server
    is SIGKILLed: the write-ahead log holds every record uncompressed) and in the answers. Now
    none is, while a marker sent beside them is (docs/capture.md, Secrets)."""
    marker = "mk" + secrets.token_hex(4)
    made: list[str] = []

    def secret() -> str:
        made.append("Qv" + secrets.token_hex(6))
        return made[-1]

    code = [
        ("python", f'creds = ["bob", "{secret()}"]\nconn = jaydebeapi.connect(d, url, creds)'),
        ("python", f'setattr(cfg, "password", "{secret()}")'),
        ("python", f'c = Client(api_key=os.getenv("K", "{secret()}"))'),
    ]
    texts = [
        f'{{"body": "{{\\"password\\": \\"{secret()}\\"}}"}}',
        f"await mcp.call({{password: `${{a}}{secret()}`}})",
        f'jaydebeapi.connect(d, url, ["bob", "{secret()}"]) raised DatabaseError',
    ]
    tag = f'{{"token": "{secret()}"}}'
    data = tmp_path / "data"
    process = ServerProcess(data, "--durability", "sync")
    process.start()
    answers: list[bytes] = []
    try:
        with grpc.insecure_channel(process.target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            records = []
            for i, (language, written) in enumerate(code):
                for ok in (True, False):
                    call = resources_pb2.ToolCall(
                        tool=f"query_{i}", ok=ok, error="" if ok else "timeout"
                    )
                    records.append(
                        resources_pb2.ExecutionRecord(
                            intent=f"query the database {marker}",
                            code=f"{written}\nmcp.query_{i}(q=1)",
                            language=language,
                            tool_calls=[call],
                            status=OK if ok else resources_pb2.EXECUTION_STATUS_FAILURE,
                            tags=[tag],
                        )
                    )
            for text in texts:
                call = resources_pb2.ToolCall(
                    tool="send", ok=False, arguments_json=json.dumps({"body": text}), error=text
                )
                records.append(
                    resources_pb2.ExecutionRecord(
                        intent=f"{text} {marker}",
                        code="await mcp.send({body: 'x'})",
                        language="javascript",
                        tool_calls=[call],
                        status=resources_pb2.EXECUTION_STATUS_FAILURE,
                    )
                )
            for n, record in enumerate(records):
                record.request_id = f"leak-{n}"
                reply = stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=record))
                answers.append(reply.SerializeToString())
            page = pml_pb2.ListPatternsRequest(page_size=100)
            answers.append(stub.ListPatterns(page).SerializeToString())
            answers.append(stub.ListFailures(pml_pb2.ListFailuresRequest()).SerializeToString())
    finally:
        process.kill()
    assert _copies_on_disk(data, marker) > 0
    leaked = {s: _copies_on_disk(data, s) for s in made}
    assert leaked == dict.fromkeys(made, 0), leaked
    assert not [s for s in made if any(s.encode() in a for a in answers)]


# ---- streams and unary calls ------------------------------------------------------------------


def test_idle_streams_never_starve_unary_calls(tmp_path: Path) -> None:
    """Single-tenant (no keys file), 16 RPC threads: 16 clients each open a stream and send
    nothing. Streams past the server's bound (half the threads) and past 4 on one connection are
    refused, a Suggest from another client is served, and the idle streams are closed."""
    process = ServerProcess(tmp_path / "data", "--stream-idle-seconds", "2")
    process.start()
    release = threading.Event()
    outcomes: list[grpc.StatusCode] = []
    lock = threading.Lock()

    def hold(channel: grpc.Channel) -> None:
        def idle() -> Iterator[pml_pb2.StreamTracesRequest]:
            release.wait(60)
            return
            yield  # a generator that sends nothing

        try:
            list(pml_pb2_grpc.PmlServiceStub(channel).StreamTraces(idle(), timeout=60))
            code = grpc.StatusCode.OK
        except grpc.RpcError as err:
            code = err.code()
        with lock:
            outcomes.append(code)

    # a channel of its own per client: grpc would otherwise share one connection between them
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(process.target, options=own) for _ in range(16)]
    threads = [threading.Thread(target=hold, args=(c,)) for c in channels]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        with PmlClient(process.target, timeout=20) as client:
            answered = client.suggest("read a file")  # refused before: every slot held
        for t in threads:
            t.join(60)  # the admitted ones end when the server closes them as idle
        phase_one = list(outcomes)
        one_channel = grpc.insecure_channel(process.target, options=own)
        same = [threading.Thread(target=hold, args=(one_channel,)) for _ in range(5)]
        for t in same:
            t.start()
        for t in same:
            t.join(60)
        one_channel.close()
    finally:
        release.set()
        for c in channels:
            c.close()
        process.terminate()
    phase_two = outcomes[len(phase_one) :]
    refused = grpc.StatusCode.RESOURCE_EXHAUSTED
    idle = grpc.StatusCode.UNAVAILABLE
    summary = report(
        "hostile_valid_idle_streams",
        {
            "streams_from_16_clients": len(phase_one),
            "refused_past_the_server_bound": phase_one.count(refused),
            "closed_when_idle": phase_one.count(idle) + phase_two.count(idle),
            "refused_past_4_on_one_connection": phase_two.count(refused),
        },
    )
    assert answered is not None
    assert sorted(c.name for c in phase_one) == ["RESOURCE_EXHAUSTED"] * 8 + ["UNAVAILABLE"] * 8
    assert sorted(c.name for c in phase_two) == ["RESOURCE_EXHAUSTED"] + ["UNAVAILABLE"] * 4, (
        summary
    )


# ---- clients ----------------------------------------------------------------------------------


def test_backoff_grows_and_honours_retry_info() -> None:
    waits = [backoff_seconds(a) for a in range(8)]
    assert all(0.05 <= w <= 5.0 for w in waits)
    assert waits[5] > waits[0]
    assert backoff_seconds(0, server_delay=2.5) == 2.5


def test_upload_survives_a_server_restarting(tmp_path: Path) -> None:
    """The server is down when the upload starts and back about a second later: the upload
    backs off and completes (it failed at once before: five retries within milliseconds)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = ServerProcess(tmp_path / "data", "--listen", f"127.0.0.1:{port}")
    process.start()
    process.terminate()

    def restart() -> None:
        time.sleep(1.0)
        process.start()

    restarter = threading.Thread(target=restart)
    restarter.start()
    records = [
        make_record(f"fetch report {i}", "await mcp.fetch({id: 1})", "javascript", ["fetch"])
        for i in range(5)
    ]
    try:
        with PmlClient(f"127.0.0.1:{port}", timeout=30) as client:
            upload = client.upload(records)
    finally:
        restarter.join(120)
        if process.proc is not None:
            process.terminate()
    assert len(upload.acks) == 5, upload
    assert upload.reconnects >= 1, upload
    assert all(a.HasField("result") for a in upload.acks.values())


# ---- tenants ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict]]:
    """`heavy` with ten giant patterns, `light` with one plain pattern; /metrics served."""
    port = free_port()
    process, keys = cost_measure.start_server(
        tmp_path_factory.mktemp("cost"), "--metrics-port", str(port)
    )
    process.metrics_port = port  # type: ignore[attr-defined]
    yield process, keys
    process.terminate()


def _metric(process: ServerProcess, name: str) -> float:
    port = process.metrics_port  # type: ignore[attr-defined]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


@pytest.mark.slow
def test_an_expensive_tenant_gives_way_to_its_neighbour(
    tenants: tuple[ServerProcess, dict],
) -> None:
    """Tenant `heavy` runs 4 concurrent Suggests and dry-run retentions over its ten giant
    patterns (from a process of its own); `light` times its own Suggest meanwhile, against
    phases with `heavy` idle. `light` gets every answer right and is never refused, `heavy`'s
    calls are served (some of them) or refused with a retry delay, and the server paused
    `heavy`'s long calls for `light`'s (`pml_fairness_pauses` on /metrics: before, nothing
    did, and light's p50 went 44x). The latency ratios are reported, not asserted:
    `python -m benches tenant_cost` holds them to 1.5x."""
    process, keys = tenants
    before = _metric(process, "pml_fairness_pauses_total")
    figures = cost_measure.measure(process, keys, trials=2, calls=60)
    pauses = _metric(process, "pml_fairness_pauses_total") - before
    summary = report(
        "hostile_valid_expensive_tenant",
        {
            k: figures[k]
            for k in (
                "neighbour_p50_ms",
                "neighbour_p99_ms",
                "p50_ratio",
                "p99_ratio",
                "neighbour_errors",
                "neighbour_wrong_answers",
                "heavy_codes",
                "load_average_1min",
            )
        }
        | {"heavy_pauses": pauses},
    )
    assert figures["neighbour_calls"] == cost_measure.WARM_UP_CALLS + 2 * 2 * 60, summary
    assert figures["neighbour_errors"] == {}, summary
    assert figures["neighbour_wrong_answers"] == 0, summary
    codes = figures["heavy_codes"]
    assert {c.split()[1] for c in codes} <= {"OK", "RESOURCE_EXHAUSTED"}, summary
    # CPU debt accrues only from served calls, so `heavy` is never refused everything; which of
    # its kinds got through before the debt refused the rest depends on timing (one CI run had
    # every Suggest refused and two retentions served).
    assert codes.get("suggest OK", 0) + codes.get("retention OK", 0) > 0, summary
    assert pauses > 0, summary


def test_unauthenticated_calls_need_no_rpc_thread(tmp_path: Path) -> None:
    """Both RPC threads are taken by a tenant's open streams: a call without a valid key is
    still answered UNAUTHENTICATED (on the refusal pool, held like a quota refusal), not left
    waiting for a thread until its deadline, as it was when the servicer refused it."""
    keys = tmp_path / "keys.json"
    key = add_key(keys, "acme", Role.WRITE)
    process = ServerProcess(
        tmp_path / "data",
        *("--keys-file", str(keys), "--max-workers", "2", "--tenant-max-in-flight", "2"),
        *("--max-streams", "2"),
    )
    process.start()
    release = threading.Event()

    def idle() -> Iterator[pml_pb2.StreamTracesRequest]:
        release.wait(60)
        return
        yield  # a generator that sends nothing

    codes: list[str] = []
    try:
        with grpc.insecure_channel(process.target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            held = [
                stub.StreamTraces(idle(), metadata=[("authorization", f"Bearer {key}")])
                for _ in range(2)
            ]
            time.sleep(1.0)  # both streams reach their handlers
            for bad in ("Bearer nope", ""):
                metadata = [("authorization", bad)] if bad else []
                try:
                    stub.GetStats(pml_pb2.GetStatsRequest(), metadata=metadata, timeout=5)
                    codes.append("OK")
                except grpc.RpcError as err:
                    codes.append(err.code().name)
            release.set()
            for call in held:
                call.cancel()
    finally:
        release.set()
        process.terminate()
    assert codes == ["UNAUTHENTICATED", "UNAUTHENTICATED"], codes


def test_streams_holding_live_executions_close_when_idle_and_spare_other_tenants(
    tmp_path: Path,
) -> None:
    """Before: streams that each sent one `started` and nothing more were never idle-closed
    (32 s and counting at --stream-idle-seconds 5), so they kept their tenant's call slots and
    the server's stream slots for good. Now they are closed as idle, saying what was not
    captured, and the slots come back: acme's Suggest and globex's stream and Suggest are served
    while they are open, then afterwards acme opens streams again."""
    keys = tmp_path / "keys.json"
    acme = add_key(keys, "acme", Role.WRITE)
    globex = add_key(keys, "globex", Role.WRITE)
    process = ServerProcess(
        tmp_path / "data", *("--keys-file", str(keys), "--stream-idle-seconds", "2")
    )  # 16 RPC threads: 8 streams server-wide, 4 calls in flight per tenant
    process.start()
    release = threading.Event()
    outcomes: list[tuple[grpc.StatusCode, str]] = []
    lock = threading.Lock()

    def live(key: str, channel: grpc.Channel) -> None:
        def started() -> Iterator[pml_pb2.StreamTracesRequest]:
            yield pml_pb2.StreamTracesRequest(
                execution_id="live",
                sequence=1,
                started=pml_pb2.ExecutionStarted(
                    intent="read a file", code="await mcp.read_file({})", language="javascript"
                ),
            )
            release.wait(60)

        stub = pml_pb2_grpc.PmlServiceStub(channel)
        metadata = [("authorization", f"Bearer {key}")]
        try:
            list(stub.StreamTraces(started(), metadata=metadata, timeout=60))
            outcome = (grpc.StatusCode.OK, "")
        except grpc.RpcError as err:
            outcome = (err.code(), err.details() or "")
        with lock:
            outcomes.append(outcome)

    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(process.target, options=own) for _ in range(7)]
    threads = [threading.Thread(target=live, args=(acme, c)) for c in channels[:3]]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        with PmlClient(process.target, api_key=acme, timeout=10) as client:
            assert client.suggest("read a file") is not None  # refused before
        neighbour = threading.Thread(target=live, args=(globex, channels[6]))
        neighbour.start()
        with PmlClient(process.target, api_key=globex, timeout=10) as client:
            assert client.suggest("read a file") is not None
        for t in [*threads, neighbour]:
            t.join(30)
        again = threading.Thread(target=live, args=(acme, channels[3]))
        again.start()
        again.join(30)
    finally:
        release.set()
        for c in channels:
            c.close()
        process.terminate()
    codes = sorted(code.name for code, _ in outcomes)
    assert codes == ["UNAVAILABLE"] * 5, outcomes
    idle = [text for code, text in outcomes if code == grpc.StatusCode.UNAVAILABLE]
    assert all("1 live execution(s)" in text and "not captured" in text for text in idle), idle


def test_unauthenticated_calls_are_held_like_quota_refusals(
    tenants: tuple[ServerProcess, dict],
) -> None:
    """8 threads calling with a wrong key for 2 s: every answer UNAUTHENTICATED; how many the
    server answered a second is reported (about 1,000/s before, when nothing held them)."""
    process, _ = tenants
    stop = time.monotonic() + 2.0
    codes: list[grpc.StatusCode] = []

    def knock() -> None:
        with grpc.insecure_channel(process.target) as channel:
            stats = pml_pb2_grpc.PmlServiceStub(channel).GetStats
            while time.monotonic() < stop:
                try:
                    stats(pml_pb2.GetStatsRequest(), metadata=[("authorization", "Bearer nope")])
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as err:
                    codes.append(err.code())

    threads = [threading.Thread(target=knock) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    summary = report(
        "hostile_valid_unauthenticated", {"threads": 8, "answers_per_second": len(codes) / 2.0}
    )
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}, summary
