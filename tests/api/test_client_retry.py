"""The typed client (pml-client) retries unary calls that are safe to repeat when the server
answers RESOURCE_EXHAUSTED or UNAVAILABLE, waiting at least the server's RetryInfo delay, and
never retries a call that is not (docs/operations.md, Quotas)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from pml_client import PmlClient, PmlClientError, make_record
from pml_client._proto.pml.v1 import pml_pb2

from pml_server.config import config_of
from tests.conftest import StartServer
from tests.support import (
    count_calls,
    open_engine,
    refusing_its_first_batch,
    slow_to_refuse_stats,
    spawn_pml_serve,
    stop_pml_serve,
)


def _refused(server: object, method: str) -> float:
    value = server.metrics.registry.get_sample_value(  # type: ignore[attr-defined]
        "pml_requests_total", {"method": method, "code": "RESOURCE_EXHAUSTED"}
    )
    return float(value or 0.0)


def test_safe_calls_retry_through_a_rate_quota(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    # One call a second per tenant: back-to-back calls are refused with RetryInfo of 1 s.
    server = start(keys_file=path, tenant_rate=1.0, tenant_burst=1)
    target = f"127.0.0.1:{server.port}"
    with PmlClient(target, api_key=found["acme-write"], retries=3) as acme:
        for _ in range(3):
            assert acme.stats().patterns == 0
        record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
        assert acme.record(record).pattern.startswith(
            "patterns/"
        )  # a record with a request id is safe to resend
    assert _refused(server, "GetStats") >= 1  # the server did refuse, and the client waited
    assert _refused(server, "RecordExecution") >= 1


def test_without_retries_the_refusal_carries_the_delay(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    server = start(keys_file=path, tenant_rate=1.0, tenant_burst=1)
    with PmlClient(f"127.0.0.1:{server.port}", api_key=found["acme-write"], retries=0) as acme:
        acme.stats()
        with pytest.raises(PmlClientError) as err:
            acme.stats()
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.value.retry_delay_seconds == pytest.approx(1.0)
    assert _refused(server, "GetStats") == 1


def test_a_call_unsafe_to_repeat_is_not_retried(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    server = start(keys_file=path, tenant_rate=1.0, tenant_burst=1)
    with PmlClient(f"127.0.0.1:{server.port}", api_key=found["acme-write"], retries=3) as acme:
        acme.stats()  # the one token
        with pytest.raises(PmlClientError) as err:
            acme.delete_pattern("patterns/none")
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _refused(server, "DeletePattern") == 1


def test_the_timeout_bounds_the_whole_call_retries_included(
    start: StartServer, data_dir: Path
) -> None:
    """The server answers UNAVAILABLE (retryable, RetryInfo 1 s) after 1.2 s; the timeout is
    2.8 s. Each retry had a fresh 2.8 s: four attempts, 7.8 s, and the call ended UNAVAILABLE.
    Now the retry, sent at 2.2 s, gets what remains (0.6 s) and the call ends
    DEADLINE_EXCEEDED within the 2.8 s (docs/api.md, Deadlines and retries)."""
    engine, calls = slow_to_refuse_stats(data_dir, 1.2)
    server = start(engine=engine)
    client = PmlClient(f"127.0.0.1:{server.port}", timeout=2.8, retries=3)
    with client, pytest.raises(PmlClientError) as err:
        client.stats()
    assert (err.value.code, calls) == (grpc.StatusCode.DEADLINE_EXCEEDED, [2])


def test_a_retry_whose_wait_outlasts_the_timeout_is_not_made(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """The quota's RetryInfo says 1 s, the timeout is 0.5 s: the client slept the second and
    sent the call again (a 0.5 s call lasting over 1 s); now the refusal is the answer, at
    once, carrying the delay."""
    path, found = keys
    server = start(keys_file=path, tenant_rate=1.0, tenant_burst=1)
    target = f"127.0.0.1:{server.port}"
    with PmlClient(target, api_key=found["acme-write"], timeout=0.5, retries=3) as acme:
        acme.stats()  # the one token
        with pytest.raises(PmlClientError) as err:
            acme.stats()
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.value.retry_delay_seconds == pytest.approx(1.0)
    assert _refused(server, "GetStats") == 1


@pytest.mark.parametrize("key", ["s3cr3t\nkey", "s3cr3t\udcff", "s3cr3t\u00e9"])
def test_a_key_that_cannot_be_a_header_is_refused_naming_api_key(key: str) -> None:
    """Each call failed INTERNAL "Invalid metadata" (a control character, a non-ASCII one) or
    raised UnicodeEncodeError from inside grpc (a lone surrogate); the key is never echoed."""
    with pytest.raises(PmlClientError) as err:
        PmlClient("127.0.0.1:1", api_key=key)
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in err.value.violations] == ["api_key"]
    assert "s3cr3t" not in str(err.value)


def test_a_message_over_the_size_limit_is_not_sent_again(start: StartServer) -> None:
    """RESOURCE_EXHAUSTED without RetryInfo is the server's message size limit: the client sent
    the same too-big record `retries` more times (4 x 50 kB here; 4 x 9 MB against a default
    server), each refused the same way. A quota's refusal (RetryInfo) is still retried. (A
    record over 64 KiB is checked against the server's limit before it is sent: this one is
    under that, so it reaches the server.)"""
    server = start(max_message_bytes=32 * 1024)
    with PmlClient(f"127.0.0.1:{server.port}", retries=3) as client:
        sent = count_calls(client._stub, "RecordExecution")
        with pytest.raises(PmlClientError) as err:
            client.record(make_record("big", "x" * 50_000, tools=["t"]))
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.value.retry_delay_seconds is None
    assert sent.count == 1


def test_an_upload_resends_what_the_server_acknowledged_as_unavailable(
    start: StartServer, data_dir: Path
) -> None:
    """A stream acknowledges each execution alone, and one the server could not take yet is
    acknowledged UNAVAILABLE (its index still catching up after a start): not captured. The
    upload took that acknowledgement as final: those records were lost to a transient state
    (`pml import` counted them refused; importing again would count twice every record that
    had no request id). Now they are resent on a new stream, as a broken stream's are."""
    engine, refused = refusing_its_first_batch(data_dir)
    server = start(engine=engine)
    records = [
        make_record(f"task {i}", f"await mcp.tool{i % 3}({{n: {i}}})", tools=[f"tool{i % 3}"])
        for i in range(20)
    ]
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        report = client.upload(records)
        stats = client.stats()
    assert refused == [1]  # the server did answer a batch UNAVAILABLE
    assert report.reconnects >= 1
    assert [a.execution_id for a in report.acks.values() if a.HasField("error")] == []
    assert set(report.acks) == {r.request_id for r in records}
    assert stats.executions == 20


def test_an_upload_out_of_reconnects_answers_with_the_servers_error(
    start: StartServer, data_dir: Path
) -> None:
    """A server that stays unable to take the records: once the reconnects run out, each
    record's acknowledgement is the server's error (never dropped, never a success)."""
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    engine._state.readiness.clear()
    server = start(engine=engine)
    records = [make_record(f"task {i}", f"await mcp.tool({{n: {i}}})") for i in range(5)]
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        report = client.upload(records, max_reconnects=0)
    assert set(report.acks) == {r.request_id for r in records}
    assert {a.error.code for a in report.acks.values()} == {grpc.StatusCode.UNAVAILABLE.value[0]}
    assert all("catching up" in a.error.message for a in report.acks.values())


def test_an_upload_to_a_server_that_stopped_answering_gives_up(tmp_path: Path) -> None:
    """A server frozen (SIGSTOP) after the connection is up: a stream has no deadline, so the
    upload waited for ever for its acknowledgements. Now each stream is cancelled once the
    server has said nothing for `timeout` while executions wait, and resent (request ids
    apply it once); once the reconnects run out the upload raises DEADLINE_EXCEEDED saying
    so. Resumed, the server captures the record once, sent again (docs/api.md, Deadlines and
    retries)."""
    proc, target = spawn_pml_serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--embedder", "hashing"
    )
    outcome: list[object] = []
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    try:
        with PmlClient(target, timeout=1.0) as client:
            assert client.stats().executions == 0  # connected
            os.kill(proc.pid, signal.SIGSTOP)

            def upload() -> None:
                try:
                    outcome.append(client.upload([record], max_reconnects=1))
                except PmlClientError as err:
                    outcome.append(err)

            uploading = threading.Thread(target=upload, daemon=True)
            uploading.start()
            uploading.join(60)  # a guard against the hang, not a measure
            os.kill(proc.pid, signal.SIGCONT)
            uploading.join(60)
            assert len(outcome) == 1, "the upload to a frozen server had not returned in 60 s"
            err = outcome[0]
            assert isinstance(err, PmlClientError), err
            assert err.code is grpc.StatusCode.DEADLINE_EXCEEDED
            assert err.message == "no answer from the server within 1.0 s (1 executions waiting)"
            assert client.upload([record]).acks[record.request_id].HasField("result")
            assert client.stats().executions == 1  # captured once, however often it was sent
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        stop_pml_serve(proc)


class _SlowServerInfo:
    """A server's dependencies whose GetServerInfo answers after `seconds` (it reads
    `schema_version`); everything else as they are."""

    def __init__(self, deps: object, seconds: float) -> None:
        self._deps = deps
        self._seconds = seconds

    def __getattr__(self, name: str) -> object:
        return getattr(self._deps, name)

    @property
    def schema_version(self) -> object:
        time.sleep(self._seconds)
        return self._deps.schema_version  # type: ignore[attr-defined]


def test_the_timeout_bounds_a_large_record_its_limit_probe_included(
    start: StartServer, data_dir: Path
) -> None:
    """A record over 64 KiB first asks the server its message limit (GetServerInfo). The probe
    had its own full timeout, then the record another: here the probe answers after 1.5 s and
    the capture takes 1 s, each within the 2 s timeout, so a 2 s call took 2.5 s and
    succeeded. Now the probe spends from the call's deadline and the record gets what remains
    (0.5 s): DEADLINE_EXCEEDED (docs/api.md, Deadlines and retries)."""
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    record_one = engine.record

    def slow_record(*args: object, **kwargs: object) -> object:
        time.sleep(1.0)
        return record_one(*args, **kwargs)  # type: ignore[arg-type]

    engine.record = slow_record  # type: ignore[assignment,method-assign]
    server = start(engine=engine)
    server.servicer._d = _SlowServerInfo(server.servicer._d, 1.5)  # type: ignore[assignment]
    big = make_record("Read a big file", "await mcp.read_file({path: 'a'})\n" + "//" * 40_000)
    with (
        PmlClient(f"127.0.0.1:{server.port}", timeout=2.0) as client,
        pytest.raises(PmlClientError) as err,
    ):
        client.record(big)
    assert err.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_raw_stream_to_a_server_that_stopped_answering_gives_up(tmp_path: Path) -> None:
    """`stream()` to a server frozen (SIGSTOP) once connected waited for ever for its
    acknowledgement (a stream has no deadline; `upload` had the watch, not `stream`). Now it
    is cancelled once the server has said nothing for `timeout` while an execution it was
    sent waits, and raises DEADLINE_EXCEEDED saying so (docs/api.md, Deadlines and retries).
    A live execution left open waits for nothing: its silence is no failure."""
    proc, target = spawn_pml_serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--embedder", "hashing"
    )
    outcome: list[object] = []
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    message = pml_pb2.StreamTracesRequest(execution_id="e1", sequence=1, record=record)
    try:
        with PmlClient(target, timeout=1.0) as client:
            # connected, and a live execution started and left open past the timeout: not
            # cancelled (nothing waits for an answer)
            def open_one() -> Iterator[pml_pb2.StreamTracesRequest]:
                yield pml_pb2.StreamTracesRequest(
                    execution_id="live",
                    sequence=1,
                    started=pml_pb2.ExecutionStarted(
                        intent="Read JSON", code="x", language="typescript"
                    ),
                )
                time.sleep(2.5)

            acks = list(client.stream(open_one()))  # answered once the stream closes
            assert [(a.execution_id, a.error.details[0].type_url[-10:]) for a in acks] == [
                ("live", "BadRequest")
            ]
            os.kill(proc.pid, signal.SIGSTOP)

            def stream() -> None:
                try:
                    outcome.append(list(client.stream([message])))
                except PmlClientError as err:
                    outcome.append(err)

            streaming = threading.Thread(target=stream, daemon=True)
            streaming.start()
            streaming.join(60)  # a guard against the hang, not a measure
            os.kill(proc.pid, signal.SIGCONT)
            streaming.join(60)
            assert len(outcome) == 1, "the stream to a frozen server had not returned in 60 s"
            err = outcome[0]
            assert isinstance(err, PmlClientError), err
            assert err.code is grpc.StatusCode.DEADLINE_EXCEEDED
            assert err.message == "no answer from the server within 1.0 s (1 executions waiting)"
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        stop_pml_serve(proc)


def test_a_call_retries_through_a_server_restart_and_counts_its_record_once(
    tmp_path: Path,
) -> None:
    """A rolling upgrade: `pml serve` stopped, and started again on the same port 1.5 s later
    (it listens some 2.5 s after the stop). A record sent meanwhile was retried 3 times over
    some 0.7 s, then failed UNAVAILABLE. Now a call safe to repeat retries for its retry
    budget (`retry_seconds`: 5 s by default, 30 here, the restart being slower on a loaded
    machine) within its timeout, and the channel reconnects within a second of the server's
    return: the record is captured, once (docs/api.md, Deadlines and retries)."""
    flags = ("--data-dir", str(tmp_path), "--embedder", "hashing")
    proc, target = spawn_pml_serve("--listen", "127.0.0.1:0", *flags)
    procs = [proc]

    def restart() -> None:
        time.sleep(1.5)
        procs.append(spawn_pml_serve("--listen", target, *flags)[0])

    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    try:
        with PmlClient(target, timeout=60, retry_seconds=30) as client:
            assert client.stats().executions == 0  # connected
            stop_pml_serve(proc)
            restarting = threading.Thread(target=restart)
            restarting.start()
            try:
                result = client.record(record)  # sent while the server is down
            finally:
                restarting.join()
            assert result.pattern.startswith("patterns/")
            assert client.stats().executions == 1
            assert client.record(record).replayed  # its resend applies once
            assert client.stats().executions == 1
    finally:
        for each in procs:
            if each.poll() is None:
                stop_pml_serve(each)


def test_retries_to_a_server_that_is_gone_end_with_the_retry_budget(tmp_path: Path) -> None:
    """The retry budget, not the timeout, ends the retries of a server that does not come
    back: UNAVAILABLE, the server's own error, well before a 60 s timeout would say
    DEADLINE_EXCEEDED."""
    proc, target = spawn_pml_serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--embedder", "hashing"
    )
    stop_pml_serve(proc)
    with (
        PmlClient(target, timeout=60, retry_seconds=1.0) as client,
        pytest.raises(PmlClientError) as err,
    ):
        client.stats()
    assert err.value.code is grpc.StatusCode.UNAVAILABLE


def test_an_upload_to_a_server_that_is_gone_asks_its_limits_once_a_stream(
    tmp_path: Path,
) -> None:
    """Before each stream an upload asks the server its limits (GetServerInfo); that ask was
    retried for a whole retry budget (5 s) before each reconnect, so an upload to a server
    that is gone took 20 s with 3 reconnects (40 s with the default 8). The reconnects are the
    upload's retries: the ask is made once a stream (docs/api.md, Deadlines and retries)."""
    proc, target = spawn_pml_serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--embedder", "hashing"
    )
    stop_pml_serve(proc)
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    with PmlClient(target) as client:
        asked = count_calls(client._stub, "GetServerInfo")
        with pytest.raises(PmlClientError) as err:
            client.upload([record], max_reconnects=3)
    assert err.value.code is grpc.StatusCode.UNAVAILABLE
    assert asked.count == 4


def test_a_raw_stream_whose_server_is_killed_says_what_was_not_acknowledged(
    tmp_path: Path,
) -> None:
    """`pml serve` killed (SIGKILL) while `stream()` sends: the caller saw only UNAVAILABLE
    "Stream removed (Socket closed)". It now says how many executions it sent that were not
    acknowledged, and that they may be sent again under the same request ids; every one that
    was acknowledged is in the store after a restart (docs/api.md, Deadlines and retries)."""
    flags = ("--data-dir", str(tmp_path), "--embedder", "hashing")
    proc, target = spawn_pml_serve("--listen", "127.0.0.1:0", *flags)
    messages = (
        pml_pb2.StreamTracesRequest(
            execution_id=f"e{i}",
            sequence=i + 1,
            record=make_record(f"Read file {i}", f"await mcp.read_file({{path: '{i}'}})"),
        )
        for i in range(5000)
    )
    acked: list[pml_pb2.StreamTracesResponse] = []

    def read(client: PmlClient) -> None:
        for ack in client.stream(messages):
            acked.append(ack)
            if len(acked) == 100:
                proc.kill()
                proc.communicate()  # its pipes closed

    restarted = None
    try:
        with PmlClient(target) as client:
            with pytest.raises(PmlClientError) as err:
                read(client)
            assert err.value.code is grpc.StatusCode.UNAVAILABLE
            assert "executions sent and not acknowledged" in err.value.message
            assert "same request ids" in err.value.message
            restarted, _ = spawn_pml_serve("--listen", target, *flags)
            captured = sum(a.HasField("result") for a in acked)
            assert client.stats().executions >= captured >= 100
    finally:
        for each in (proc, restarted):
            if each is not None and each.poll() is None:
                stop_pml_serve(each)


def test_a_closed_client_refuses_every_call_sending_nothing(start: StartServer) -> None:
    """After close() (twice: no error) a call raised grpc's ValueError "Cannot invoke RPC on
    closed channel!", which no `except PmlClientError` caught. Each now raises PmlClientError
    CANCELLED, "the client is closed", and nothing reaches the server."""
    server = start()
    target = f"127.0.0.1:{server.port}"
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    client = PmlClient(target)
    client.stats()  # connected
    client.close()
    client.close()
    calls: dict[str, Callable[[], object]] = {
        "stats": client.stats,
        "record": lambda: client.record(record),
        "upload": lambda: client.upload([record]),
        "stream": lambda: list(client.stream([])),
    }
    for name, call in calls.items():
        with pytest.raises(PmlClientError) as err:
            call()
        assert (err.value.code, err.value.message) == (
            grpc.StatusCode.CANCELLED,
            "the client is closed (close() was called): nothing was sent",
        ), name
    with PmlClient(target) as fresh:
        assert fresh.stats().executions == 0
