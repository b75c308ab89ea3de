"""The Node package (clients/node: @grpc/grpc-js + @grpc/proto-loader over its own copy of the
protos) records, streams and suggests against the running server, from a copy of the package
that cannot reach the repository's proto/; it runs nothing when required, and its TypeScript
types compile."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from pml_server.api.server import RunningServer
from pml_server.config import config_of
from pml_server.domain.model import ExecutionRecord
from tests.api.test_operations import pki  # noqa: F401  (the throwaway CA fixture)
from tests.conftest import StartServer
from tests.support import (
    npm_ci,
    open_engine,
    refusing_its_first_batch,
    slow_to_refuse_stats,
    spawn_pml_serve,
    stop_pml_serve,
)

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"


@pytest.fixture(scope="session")
def node_client() -> Path:
    if shutil.which("node") is None:
        pytest.fail("Node.js is needed for the cross-language client test")
    npm_ci(NODE_CLIENT, "for the client test", NODE_CLIENT / "node_modules" / "typescript")
    return NODE_CLIENT


@pytest.fixture
def installed_elsewhere(node_client: Path, tmp_path: Path) -> Path:
    """The package's published files alone in a directory of their own, as `npm install` lays
    them out (its dependencies beside it), far from the repository's proto/."""
    package = tmp_path / "node_modules" / "pml-client"
    shutil.copytree(
        node_client, package, ignore=shutil.ignore_patterns("node_modules", "package-lock.json")
    )
    (package / "node_modules").symlink_to(node_client / "node_modules")
    return package


def _node(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_node_client_records_and_suggests(installed_elsewhere: Path, server: RunningServer) -> None:
    done = _node(installed_elsewhere, "examples/record_and_suggest.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["outcomes"] == [
        "CAPTURE_OUTCOME_SAVED",
        "CAPTURE_OUTCOME_COUNTED",
        "CAPTURE_OUTCOME_COUNTED",
    ]
    best = summary["best"]
    assert best["tools"] == ["read_file", "parse_json"]
    assert best["usage"] == 3
    assert best["score"]["total"] > 0
    assert summary["refused"]["code"] == "INVALID_ARGUMENT"
    assert summary["refused"]["details"] == ["type.googleapis.com/google.rpc.BadRequest"]
    assert summary["refused"]["fields"] == ["intent"]


def test_requiring_the_package_or_the_example_runs_nothing(installed_elsewhere: Path) -> None:
    script = (
        "const pml = require('pml-client');"
        "const manifest = require('pml-client/package.json');"
        "require('./examples/record_and_suggest.js');"
        "console.log(JSON.stringify({keys: Object.keys(pml).sort(), name: manifest.name}));"
    )
    done = _node(installed_elsewhere, "-e", script)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "keys": [
            "LOADER_OPTIONS",
            "PROTO_ROOT",
            "PmlClient",
            "backoffMs",
            "errorDetails",
            "newRecord",
        ],
        "name": "pml-client",
    }


def test_typescript_types_compile(node_client: Path) -> None:
    done = subprocess.run(
        ["npm", "run", "--silent", "typecheck"],
        cwd=node_client,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_upload_resends_after_a_broken_stream(node_client: Path, server: RunningServer) -> None:
    """A proxy breaks the connection mid-upload; the records not acknowledged are resent and
    every one is applied exactly once."""
    done = _node(node_client, "test/upload_resend.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["reconnects"] >= 1, summary
    assert summary["acks"] == 300
    assert summary["refused"] == 0
    assert summary["executions"] == 300
    assert summary["patterns"] == 4


def test_upload_resends_what_the_server_acknowledged_as_unavailable(
    node_client: Path, start: StartServer, data_dir: Path
) -> None:
    """As the Python and Go clients: executions acknowledged UNAVAILABLE (the server's index
    still catching up after a start) were not captured; they are resent on a new stream."""
    engine, refused = refusing_its_first_batch(data_dir)
    server = start(engine=engine)
    done = _node(node_client, "test/upload_unavailable.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert refused == [1]  # the server did acknowledge a batch UNAVAILABLE
    assert summary["reconnects"] >= 1, summary
    assert (summary["acks"], summary["errors"], summary["executions"]) == (20, [], 20)


def test_upload_out_of_reconnects_answers_with_the_servers_error(
    node_client: Path, start: StartServer, data_dir: Path
) -> None:
    """A server that stays unable to take the records: resent until the reconnects run out,
    then each record's acknowledgement is the server's error (never dropped, never thrown)."""
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    engine._state.readiness.clear()
    server = start(engine=engine)
    done = _node(node_client, "test/upload_unavailable.js", f"127.0.0.1:{server.port}", "1")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["reconnects"], summary["acks"]) == (1, 20)
    assert {e["code"] for e in summary["errors"]} == {grpc.StatusCode.UNAVAILABLE.value[0]}
    assert len(summary["errors"]) == 20
    assert all("catching up" in e["message"] for e in summary["errors"])


def test_upload_refuses_alone_a_record_over_the_servers_message_limit(
    node_client: Path, start: StartServer
) -> None:
    """As the Python and Go clients: the oversized record is answered RESOURCE_EXHAUSTED with a
    BadRequest detail and never sent; the two others are captured on the same stream."""
    server = start(max_message_bytes=64 * 1024)
    done = _node(node_client, "test/upload_too_big.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["acks"] == 3
    assert summary["code"] == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "over the server's --max-message-bytes of 65536" in summary["message"]
    assert summary["details"] == ["type.googleapis.com/google.rpc.BadRequest"]
    assert (summary["captured"], summary["executions"], summary["reconnects"]) == (2, 2, 0)


def test_upload_refuses_two_records_under_one_request_id(
    node_client: Path, server: RunningServer
) -> None:
    """As the Go client: acknowledgements are keyed by request id, so a repeated one is refused
    INVALID_ARGUMENT naming the record before anything is sent."""
    done = _node(node_client, "test/upload_repeated_id.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "records[1].request_id" in summary["message"]
    assert summary["executions"] == 0


def test_unary_calls_safe_to_repeat_retry_through_a_quota(
    node_client: Path, start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """As the Python and Go clients: reads and a record with a request id wait out a
    RESOURCE_EXHAUSTED (at least its RetryInfo) and succeed; a delete is not sent again."""
    path, found = keys
    server = start(keys_file=path, tenant_rate=1.0, tenant_burst=1)
    key = found["acme-write"]
    done = _node(node_client, "test/retries.js", f"127.0.0.1:{server.port}", key)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert summary["stats"] == 3
    assert summary["recorded"].startswith("patterns/")
    assert summary["deletedCode"] == exhausted
    assert summary["refusedCode"] == exhausted
    assert summary["retryDelayMs"] == 1000
    assert summary["backoffAtLeastDelay"] is True
    refused = server.metrics.registry.get_sample_value(
        "pml_requests_total", {"method": "GetStats", "code": "RESOURCE_EXHAUSTED"}
    )
    assert refused is not None
    assert refused >= 2  # retried refusals, then the one not retried


def test_a_record_over_the_size_limit_is_not_sent_again(
    node_client: Path, start: StartServer
) -> None:
    """As the Python and Go clients: RESOURCE_EXHAUSTED without RetryInfo is the server's
    message size limit, which no wait cures; the record was sent `maxRetries` more times at
    full size. A quota's refusal (RetryInfo) is still retried (test_unary_calls_...quota)."""
    server = start(max_message_bytes=64 * 1024)
    done = _node(node_client, "test/unary_too_big.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert summary["code"] == exhausted
    assert summary["retryDelayMs"] is None
    assert summary["sent"] == 1
    # record() asks the limit and sends nothing, naming the record, as the Python client's (it
    # sent the record whole for grpc's "Received message larger than max", naming no field)
    refused = summary["record"]
    assert (refused["sent"], refused["code"], refused["fields"]) == (0, exhausted, ["record"])
    assert refused["message"].startswith("not sent: the record is ")
    assert refused["message"].endswith(
        "bytes as a message, over the server's --max-message-bytes of 65536"
    )


def test_upload_waits_out_a_quota_that_refused_its_stream(
    node_client: Path, start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """As the Python and Go clients: a stream refused RESOURCE_EXHAUSTED with RetryInfo (the
    tenant's one call a second, spent on the upload's GetServerInfo) is opened again once that
    delay has passed. The upload gave up at once, or (reconnecting without waiting) spent its
    reconnects on the same refusal; one reconnect does it."""
    path, found = keys
    server = start(keys_file=path, tenant_rate=1.0, tenant_burst=1)
    done = _node(
        node_client, "test/upload_quota.js", f"127.0.0.1:{server.port}", found["acme-write"]
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["reconnects"], summary["acks"], summary["captured"]) == (1, 2, 2)
    assert summary["executions"] == 2
    refused = server.metrics.registry.get_sample_value(
        "pml_requests_total", {"method": "StreamTraces", "code": "RESOURCE_EXHAUSTED"}
    )
    assert refused == 1  # the server did refuse the first stream


def test_tls_options_it_cannot_use_are_refused_naming_the_option(
    node_client: Path, tmp_path: Path
) -> None:
    """A keyFile without its certFile connected in plaintext; the other bad TLS options said
    neither which option nor which file (`ENOENT: ...`, `Certificate chain must be given with
    accompanying private key`), or nothing (a caFile that is no PEM)."""
    (tmp_path / "not.pem").write_text("not a certificate")
    done = _node(node_client, "test/tls_options.js", str(tmp_path))
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    pair = said.pop("pairNotPem")
    assert pair.startswith(
        f"pml: certFile {tmp_path / 'not.pem'}, keyFile {tmp_path / 'not.pem'}: "
    )
    mutual = "mutual TLS needs the client certificate and its key"
    assert said == {
        "keyAlone": f"pml: keyFile given without certFile: {mutual}",
        "certAlone": f"pml: certFile given without keyFile: {mutual}",
        "keyAloneWithTls": f"pml: keyFile given without certFile: {mutual}",
        "caMissing": f"pml: caFile {tmp_path / 'missing.pem'} cannot be read: "
        "ENOENT: no such file or directory",
        "caDirectory": f"pml: caFile {tmp_path} cannot be read: "
        "EISDIR: illegal operation on a directory",
        "caNotPem": f"pml: caFile {tmp_path / 'not.pem'} holds no PEM certificate",
    }


def test_arguments_the_client_refuses_are_type_errors_naming_them(
    node_client: Path, tmp_path: Path
) -> None:
    """The client's own refusals of its arguments (a bad target, bad options, the TLS files,
    a call's or an upload's options, `call`'s method) were plain TypeErrors (the TLS files'
    plain Errors) without the code and BadRequest of a refused request: each is a TypeError
    with code INVALID_ARGUMENT and a google.rpc.BadRequest naming the argument
    (`errorDetails(err)`), its message as before (clients/node/README.md)."""
    (tmp_path / "not.pem").write_text("not a certificate")
    done = _node(node_client, "test/argument_errors.js", str(tmp_path))
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert "s3cr3t" not in done.stdout  # a key refused is never echoed, nor in the details
    fields = {
        "targetEmpty": ["target"],
        "targetNumber": ["target"],
        "targetUrl": ["target"],
        "targetPort": ["target"],
        "optionsNull": ["options"],
        "optionTypo": ["timeout"],
        "timeoutZero": ["timeoutMs"],
        "retriesText": ["maxRetries"],
        "budgetNegative": ["retryBudgetMs"],
        "keyNotString": ["apiKey"],
        "keyNewline": ["apiKey"],
        "tlsText": ["tls"],
        "caFileNumber": ["caFile"],
        "keyAlone": ["keyFile"],
        "caMissing": ["caFile"],
        "caNotPem": ["caFile"],
        "pairNotPem": ["certFile", "keyFile"],
        "callMethod": ["method"],
        "callOptionTypo": ["timeoutMs"],
        "callSignal": ["signal"],
        "uploadReconnects": ["maxReconnects"],
        "uploadOnAck": ["onAck"],
    }
    assert {case: shape[:3] for case, shape in said.items()} == {
        case: [True, "INVALID_ARGUMENT", named] for case, named in fields.items()
    }
    assert said["timeoutZero"][3] == (
        "pml: timeoutMs 0: a number of milliseconds above 0, at most 2147483647 (24.8 days)"
    )


def test_upload_to_a_server_that_is_down_gives_up_unavailable(node_client: Path) -> None:
    """Nothing listens: each stream waits for the connection at most timeoutMs, and the upload
    rejects UNAVAILABLE naming the address once the reconnects run out (it waited forever:
    this test's subprocess timed out)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there
    done = _node(node_client, "test/upload_server_down.js", target)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    assert said["message"].startswith(f"no connection to {target} within 500 ms")


def test_an_upload_to_a_server_that_is_gone_asks_its_limits_once(node_client: Path) -> None:
    """Node asks the server's limits once an upload; that ask was retried for a whole retry
    budget (6 asks in 2 s here) before the first stream. The streams' reconnects are the
    upload's retries: it is asked once (docs/api.md, Deadlines and retries)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there
    done = _node(node_client, "test/upload_limits_asked.js", target)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    assert said["asked"] == 1


def test_a_call_retries_through_a_server_restart_and_counts_its_record_once(
    node_client: Path, tmp_path: Path
) -> None:
    """As the Python client's: `pml serve` stopped, started again on the same port 1.5 s
    later; a record sent meanwhile was retried 3 times over some 0.7 s and failed UNAVAILABLE.
    Now it retries for `retryBudgetMs` (5 s by default, 30 s here), the channel reconnecting
    within a second of the server's return: captured, and its resend replayed (docs/api.md,
    Deadlines and retries)."""
    flags = ("--data-dir", str(tmp_path), "--embedder", "hashing")
    proc, target = spawn_pml_serve("--listen", "127.0.0.1:0", *flags)
    stop_pml_serve(proc)
    client = subprocess.Popen(
        ["node", "test/restart.js", target],
        cwd=node_client,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    proc, _ = spawn_pml_serve("--listen", target, *flags)
    try:
        out, err = client.communicate(timeout=60)
    finally:
        stop_pml_serve(proc)
    assert client.returncode == 0, err
    said = json.loads(out)
    assert said.get("pattern", "").startswith("patterns/"), said
    assert (said["replayed"], said["executions"]) == (True, 1)


def test_upload_refuses_records_that_are_not_records(
    node_client: Path, server: RunningServer
) -> None:
    """A null among the records, a number, a string, a record that does not serialize:
    INVALID_ARGUMENT naming it, nothing sent (a null threw `Cannot read properties of null
    (reading 'request_id')`; the record threw protobufjs's error with no code, naming no
    record, the records before it written on a stream left open)."""
    done = _node(node_client, "test/upload_not_records.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    # each names its field in a BadRequest, as the Python client's refusals (they had none)
    assert json.loads(done.stdout) == [
        {
            "code": invalid,
            "message": "records[1] is null, not an ExecutionRecord (nothing was sent)",
            "fields": ["records[1]"],
        },
        {
            "code": invalid,
            "message": "records[0] is number, not an ExecutionRecord (nothing was sent)",
            "fields": ["records[0]"],
        },
        {
            "code": invalid,
            "message": "records: an array of ExecutionRecords (nothing was sent)",
            "fields": ["records"],
        },
        {
            "code": invalid,
            "message": "records[1].tool_calls is a string, not an array of pml.v1.ToolCall "
            "(one: [value]) (nothing was sent)",
            "fields": ["records[1].tool_calls"],
        },
        {
            "code": invalid,
            "message": 'records[1].request_id "r1" repeats records[0]\'s: give each record its '
            "own request id (nothing was sent)",
            "fields": ["records[1].request_id"],
        },
        {  # it threw "Cannot add property request_id, object is not extensible"
            "code": invalid,
            "message": "records[1].request_id is empty and cannot be set (the record is frozen): "
            "give each record its own request id, as newRecord does (nothing was sent)",
            "fields": ["records[1].request_id"],
        },
        {"executions": 0},
    ]


def test_a_request_field_of_another_type_is_refused_naming_it(
    node_client: Path, server: RunningServer
) -> None:
    """As the Python client (tests/api/test_client_arguments.py): grpc-js serializes with
    protobufjs's fromObject, which coerced what it was given: `include_flagged: "no"` and a tool
    call's `ok: "false"` were sent true (RunRetention's `apply: "false"` applied a retention),
    an unknown enum name as unspecified, `page_size` "5", NaN, Infinity, 2.5 as 5, 0, 0, 2,
    `intent: 5` as "5", a Date as an empty Timestamp, `pageSize` dropped. A lone surrogate was
    sent as bytes that are not UTF-8: the server refused naming only "request", and an upload's
    whole stream broke, the acknowledgement of the record before it lost. Each is refused
    INVALID_ARGUMENT with a BadRequest violation naming the field, nothing sent."""
    done = _node(node_client, "test/request_types.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    # an object of a class (by its own keys) and an int64 as decimal text are still taken
    assert said.pop("took") == "CAPTURE_OUTCOME_SAVED"
    assert said.pop("executions") == 1
    assert {name: out["fields"] for name, out in said.items()} == {
        "flaggedText": ["include_flagged"],
        "intentNumber": ["intent"],
        "pageSizeText": ["page_size"],
        "pageSizeNaN": ["page_size"],
        "pageSizeInfinity": ["page_size"],
        "pageSizeFraction": ["page_size"],
        "minMatchText": ["min_match"],
        "toolsText": ["available_tools"],
        "toolsArray": ["available_tools"],
        "toolsInnerText": ["available_tools.tools"],
        "tagNumber": ["tags[1]"],
        "camelCase": ["pageSize"],
        "loneSurrogate": ["intent"],
        "previousTool": ["context.previous_tools[1]"],
        "okText": ["record.tool_calls[0].ok"],
        "toolNull": ["record.tool_calls[0]"],
        "recordSurrogate": ["record.intent"],
        "startDate": ["record.start_time"],
        "nameNumber": ["name"],
        "applyText": ["apply"],
        "statusUnknown": ["record.status"],
        "upload": ["records[1].intent"],
        "uploadOk": ["records[0].tool_calls[0].ok"],
    }
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert {out["code"] for out in said.values()} == {invalid}
    assert all(out["message"].endswith("(nothing was sent)") for out in said.values())
    assert said["okText"]["message"] == (
        "RecordExecution: record.tool_calls[0].ok is a string, not a boolean (nothing was sent)"
    )
    assert said["upload"]["message"] == (
        "records[1].intent holds a lone surrogate U+D800 at character 5, which is not Unicode "
        "text (protobuf strings are UTF-8) (nothing was sent)"
    )


def test_bad_arguments_are_refused_naming_them(node_client: Path, server: RunningServer) -> None:
    """A timeoutMs that is no positive number failed every call (DEADLINE_EXCEEDED at once, or
    grpc-js's `deadline must be a number or Date`), a maxRetries of text was taken as none,
    `call` of an unknown name threw `this.raw[method] is not a function`, an upload's
    maxReconnects of text reconnected without end, and an onAck that threw was an uncaught
    exception (the end of a Node process) while the upload resolved. An API key with a newline
    or a non-ASCII character failed every call with grpc-js's `Metadata string value "Bearer
    <the key>" contains illegal characters` (the secret in the message), one that is no string
    went as "Bearer 5"; `tls: "no"` turned TLS on, `caFile: 5` read file descriptor 5, options
    that were no object were ignored (null threw `Cannot read properties of null`), an empty
    target said `Could not parse target name ""`. A request that does not serialize failed
    INTERNAL "Request message serialization failure" once connected (a string was sent as an
    empty request): INVALID_ARGUMENT naming the field, nothing sent."""
    done = _node(node_client, "test/bad_arguments.js", f"127.0.0.1:{server.port}")
    # (a timeoutMs of 1e300 threw "Deadline is too far in the future" uncaught from grpc-js)
    assert done.returncode == 0, done.stderr
    assert "s3cr3t" not in done.stdout  # a key refused is never echoed
    unary = "a unary RPC of pml.v1.PmlService"
    ascii_key = "a key is printable ASCII (as `pml keys add` prints it)"
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    ms = "a number of milliseconds above 0, at most 2147483647 (24.8 days)"
    assert json.loads(done.stdout) == {
        "timeoutZero": f"pml: timeoutMs 0: {ms}",
        "timeoutText": f'pml: timeoutMs "5000": {ms}',
        "timeoutHuge": f"pml: timeoutMs 1e+300: {ms}",
        "timeoutInfinite": f"pml: timeoutMs Infinity: {ms}",
        "retriesText": 'pml: maxRetries "3": an integer from 0 (0: none), or Infinity',
        "retriesNegative": "pml: maxRetries -1: an integer from 0 (0: none), or Infinity",
        "keyNewline": f"pml: apiKey holds U+000A at position 6: {ascii_key}",
        "keyNotAscii": f"pml: apiKey holds U+00E9 at position 6: {ascii_key}",
        "keyNotString": "pml: apiKey is number, not a string",
        "keyTooLong": "pml: apiKey is 1200 characters; a key is at most 1024 "
        "(`pml keys add` prints 47)",
        "tlsText": 'pml: tls "no": true or false',
        "caFileNumber": "pml: caFile 5: a file path",
        "optionsText": "pml: options is string, not an object",
        "optionsNull": "pml: options is null, not an object",
        # an option no client takes was ignored without a word
        "optionTypo": 'pml: option "timeout" is none of apiKey, tls, caFile, certFile, keyFile, '
        "timeoutMs, retryBudgetMs, maxRetries",
        "targetEmpty": 'pml: target "": give "host:port"',
        "targetNumber": 'pml: target 50051: give "host:port"',
        "targetSpace": 'pml: target "127.0.0.1 :50051" holds a space or a control character: '
        'give "host:port"',
        "targetUrl": 'pml: target "http://127.0.0.1:50051" is a URL (TLS is the tls option): '
        'give "host:port"',
        "targetPort": 'pml: target "127.0.0.1:99999" has the port 99999: a port is 1 to 65535: '
        'give "host:port"',
        "targetNewline": "answered",
        "Nope": f'pml: call: no RPC "Nope": {unary}',
        "StreamTraces": "pml: call: StreamTraces is a stream (upload(), or "
        f"pml.raw.StreamTraces): {unary}",
        "constructor": f'pml: call: no RPC "constructor": {unary}',
        "requestText": f"{invalid} GetStats: the request is string, not a GetStatsRequest "
        "object (nothing was sent)",
        "suggestNumber": f"{invalid} Suggest: the request is number, not a SuggestRequest "
        "object (nothing was sent)",
        "suggestTagsText": f"{invalid} Suggest: tags is a string, not an array of string "
        "(one: [value]) (nothing was sent)",
        "recordText": f"{invalid} RecordExecution: record is a string, not a "
        "pml.v1.ExecutionRecord object (nothing was sent)",
        "callOptionTimeout": f'{invalid} pml: call GetStats: option "timeoutMs" is none of signal',
        "requestTextFields": ["request"],
        "reconnectsText": 'pml: upload: maxReconnects "5": an integer from 0 (0: none)',
        "uploadOptionTypo": 'pml: upload: option "maxReconnect" is none of maxReconnects, '
        "onAck, signal",
        "onAckNotAFunction": "pml: upload: onAck is string, not a function",
        "onAck": "onAck failed",
        "onAckAsync": "async onAck failed",
        "uncaught": None,
    }


def test_the_timeout_bounds_the_whole_call_retries_included(
    node_client: Path, start: StartServer, data_dir: Path
) -> None:
    """As the Python and Go clients: GetStats answers UNAVAILABLE (RetryInfo 1 s) after 1.2 s,
    timeoutMs is 2800. Each retry had a fresh 2800 ms: four attempts, 7.8 s, UNAVAILABLE. Now
    the retry gets what remains and the call rejects DEADLINE_EXCEEDED (docs/api.md, Deadlines
    and retries)."""
    engine, calls = slow_to_refuse_stats(data_dir, 1.2)
    server = start(engine=engine)
    done = _node(node_client, "test/deadline.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"code": grpc.StatusCode.DEADLINE_EXCEEDED.value[0]}
    assert calls == [2]


def test_an_abort_signal_cancels_the_call_and_its_retries(
    node_client: Path, start: StartServer, data_dir: Path
) -> None:
    """`signal` (an AbortSignal) on a call or an upload: there was none, so a caller could not
    stop a call short of its timeout, retries included. Aborted in flight or while waiting to
    retry, the call rejects with an AbortError (code CANCELLED, the reason as its cause) and is
    not sent again; aborted already, nothing is sent."""
    engine, calls = slow_to_refuse_stats(data_dir, 2.0)
    record_many = engine.record_many
    batches = [0]

    def slow_record_many(tenant: str, records: Sequence[ExecutionRecord]) -> list[object]:
        batches[0] += 1
        time.sleep(2.0)
        return list(record_many(tenant, records))

    engine.record_many = slow_record_many  # type: ignore[assignment,method-assign]
    server = start(engine=engine)
    done = _node(node_client, "test/abort.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    cancelled = grpc.StatusCode.CANCELLED.value[0]

    def aborted(cause: str) -> dict[str, object]:
        return {"name": "AbortError", "code": cancelled, "detailsCode": "CANCELLED", "cause": cause}

    assert said == {
        "inFlight": aborted("in flight"),
        "waiting": aborted("waiting"),
        "streaming": aborted("streaming"),
        "before": aborted("before"),
        "uploadBefore": aborted("before"),
        "notASignal": "TypeError: pml: call GetStats: signal is string, not an AbortSignal",
        "notOptions": "TypeError: pml: call GetStats: options is number, "
        "not an object ({ signal })",
    }
    assert calls == [2]  # one attempt each for the two calls that were sent, no retry
    assert batches == [1]  # the upload aborted in flight: the one aborted already sent none


def test_upload_to_a_server_that_stopped_answering_gives_up(
    node_client: Path, tmp_path: Path
) -> None:
    """As the Python and Go clients: a server frozen (SIGSTOP) once connected left the upload
    waiting for ever (a stream has no deadline; this test's subprocess timed out). Each stream
    the server leaves unanswered for timeoutMs is cancelled as broken; out of reconnects, the
    upload rejects DEADLINE_EXCEEDED saying so (docs/api.md, Deadlines and retries)."""
    proc, target = spawn_pml_serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--embedder", "hashing"
    )
    try:
        done = _node(node_client, "test/upload_frozen.js", target, str(proc.pid))
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        stop_pml_serve(proc)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "code": grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
        "message": "no answer from the server within 1000 ms (1 executions waiting)",
        "aborted": f"AbortError {grpc.StatusCode.CANCELLED.value[0]} enough",
    }


def test_a_certificate_the_ca_did_not_sign_is_never_retried(
    node_client: Path,
    start: StartServer,
    pki: Path,  # noqa: F811
) -> None:
    """A server whose certificate `caFile` did not sign: grpc-js says UNAVAILABLE, as of a
    server down, so the call was tried maxRetries more times, and the upload waited timeoutMs
    for the connection on each reconnect, then said only "no connection ... within". A
    certificate failure is permanent: one attempt, an error naming TLS and caFile, the upload's
    at once (docs/api.md, Deadlines and retries)."""
    server = start(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    target = f"127.0.0.1:{server.port}"
    done = _node(node_client, "test/tls_wrong_ca.js", target, str(pki / "other.pem"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["stats"]["attempts"] == 1
    for call in ("stats", "upload"):
        assert out[call]["code"] == "UNAVAILABLE"
        assert out[call]["message"].startswith("pml: TLS: the server's certificate was not")
        assert "caFile must be the PEM of the CA that signed it" in out[call]["message"]


def test_a_server_asking_for_a_client_certificate_is_never_retried(
    node_client: Path,
    start: StartServer,
    pki: Path,  # noqa: F811
) -> None:
    """A server with a client CA (mutual TLS) closes the connection of a client without a
    certificate once the handshake is done: grpc-js said only UNAVAILABLE "No connection
    established", as of a server gone, and each call was retried for its budget. The client
    asks the server in a handshake of its own, in which the server asks for a certificate: one
    attempt, an error naming certFile and keyFile, the upload's at once (docs/api.md,
    Deadlines and retries)."""
    server = start(
        tls_cert=pki / "server.pem", tls_key=pki / "server.key", tls_client_ca=pki / "ca.pem"
    )
    target = f"127.0.0.1:{server.port}"
    done = _node(node_client, "test/tls_wrong_ca.js", target, str(pki / "ca.pem"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["stats"]["attempts"] == 1
    for call in ("stats", "upload"):
        assert out[call]["code"] == "UNAVAILABLE"
        assert out[call]["message"].startswith(
            "pml: TLS: the server refused the handshake: it asks for a client certificate"
        )
        assert "pass certFile and keyFile" in out[call]["message"]


@pytest.mark.parametrize("client_tls", [True, False])
def test_tls_on_one_side_only_is_never_retried(
    node_client: Path,
    start: StartServer,
    pki: Path,  # noqa: F811
    client_tls: bool,
) -> None:
    """A client with a caFile and a server in plaintext (grpc-js: UNAVAILABLE "wrong version
    number"), or a client without TLS and a server with it (UNAVAILABLE "No connection
    established. Last error: Failed to connect"): as of a server down, each call was retried
    for its budget, and the upload waited timeoutMs on each reconnect, then said only "no
    connection ... within". One attempt, an error saying which side speaks TLS and naming the
    options, the upload's at once (docs/api.md, Deadlines and retries)."""
    if client_tls:
        server = start()
        said = "pml: TLS: the server does not speak TLS ("
        names = "leave tls, caFile, certFile and keyFile unset"
    else:
        server = start(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
        said = "pml: TLS: the server speaks TLS and this client connected in plaintext ("
        names = "pass tls: true, or caFile"
    ca = str(pki / "ca.pem") if client_tls else ""
    done = _node(node_client, "test/tls_wrong_ca.js", f"127.0.0.1:{server.port}", ca)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["stats"]["attempts"] == 1
    for call in ("stats", "upload"):
        assert out[call]["code"] == "UNAVAILABLE"
        assert out[call]["message"].startswith(said), out[call]
        assert names in out[call]["message"]


def test_a_closed_client_refuses_every_call_sending_nothing(
    node_client: Path, server: RunningServer
) -> None:
    """After close() (twice: no error), a call rejected with grpc-js's "Channel has been shut
    down" and no code, and upload() still sent its record and resolved as if captured. Each
    now rejects CANCELLED, "pml: the client is closed", and nothing reaches the server."""
    done = _node(node_client, "test/closed.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for call in ("stats", "record", "upload"):
        assert out[call] == {
            "code": "CANCELLED",
            "message": "pml: the client is closed (close() was called): nothing was sent",
        }, call
    assert out["executions"] == 0


def test_a_call_refused_by_the_concurrency_limit_is_retried(
    node_client: Path, start: StartServer
) -> None:
    """As the Python client (tests/api/admission/test_quotas.py): grpcio's "Concurrent RPC
    limit exceeded!" (no RetryInfo) was taken for a size limit and never retried, so a
    Promise.all of 300 records lost those over the server's 256. It is retried now."""
    server = start(max_concurrent_rpcs=2)
    done = _node(node_client, "test/concurrency_limit.js", f"127.0.0.1:{server.port}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "outcome": "CAPTURE_OUTCOME_SAVED",
        "attempts": 2,
        "executions": 3,
    }
