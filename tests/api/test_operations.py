"""Operations: SIGTERM drains a real server process without losing an acknowledged write,
Prometheus metrics, structured logs, reflection, TLS and mutual TLS."""

from __future__ import annotations

import http.client
import json
import logging
import re
import signal
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from pml_server import cli
from pml_server.client import (
    CertificateError,
    ClientCertificateError,
    PmlClient,
    PmlClientError,
    TlsMismatchError,
    make_record,
)
from pml_server.config import config_of
from tests.conftest import StartServer
from tests.support import count_calls, open_engine, spawn_pml_serve, stop_pml_serve

ROOT = Path(__file__).resolve().parents[2]


def _spawn(data_dir: Path, *flags: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.api.serve_for_test", str(data_dir), *flags],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"\(port (\d+)\)", line)
    assert match, f"no port announced: {line!r}"
    return proc, int(match.group(1))


def test_sigterm_drains_and_loses_no_acknowledged_write(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc, port = _spawn(data_dir)
    acked: list[str] = []
    refused: list[grpc.StatusCode] = []
    lock = threading.Lock()
    enough = threading.Event()

    def writer(w: int) -> None:
        with PmlClient(f"127.0.0.1:{port}", timeout=15) as client:
            for i in range(500):
                try:
                    client.record(
                        make_record(
                            f"job {w}",
                            f"await mcp.job_{w}(n{i})",
                            tools=[f"job_{w}"],
                            request_id=f"w{w}-{i}",
                        )
                    )
                except PmlClientError as err:
                    with lock:
                        refused.append(err.code)
                    return
                with lock:
                    acked.append(f"w{w}-{i}")
                    if len(acked) >= 60:
                        enough.set()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    assert enough.wait(60)
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert set(refused) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(entry["msg"] == "pml stopped" for entry in logs)

    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    try:
        counted = sum(p.usage_count for p in _all_patterns(engine))
    finally:
        engine.close()
    # Every acknowledged capture is on disk (a capture in flight at the signal may have been
    # applied without its answer reaching the client: never fewer, at most one more per writer).
    assert len(acked) <= counted <= len(acked) + len(threads)
    print(f"SIGTERM test: {len(acked)} acknowledged, {counted} found after restart")


def test_sigterm_delivered_to_another_thread_still_stops_the_server(tmp_path: Path) -> None:
    """The kernel gives a process's SIGTERM to any thread that does not block it (gRPC's and
    ours do not). Python runs the handler only on the main thread, and a main thread blocked on
    a lock with no timeout never gets to it: a CI run's restarted server ignored SIGTERM for 60 s
    (the main thread's traceback was in `Event.wait`, the handler had not run)."""
    proc, port = _spawn(tmp_path / "data", "--sigterm-from-a-thread")
    assert proc.stdin is not None
    with PmlClient(f"127.0.0.1:{port}", timeout=15) as client:
        client.record(make_record("ping", "await mcp.ping()", tools=["ping"]))
    proc.stdin.write("now\n")
    proc.stdin.flush()
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGTERM handed to a worker thread did not stop the server") from None
    assert proc.returncode == 0, stderr
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert [entry["msg"] for entry in logs if entry["msg"].startswith("signal")] == [
        "signal 15: draining"
    ]
    assert any(entry["msg"] == "pml stopped" for entry in logs)


def _all_patterns(engine: object) -> list[object]:
    from pml_server.domain.model import PageRequest

    items, cursor = [], ""
    while True:
        page = engine.list_patterns("default", PageRequest(page_size=1000, cursor=cursor))  # type: ignore[attr-defined]
        items.extend(page.items)
        cursor = page.next_cursor
        if not cursor:
            return items


def test_metrics_count_requests_and_captures(start: StartServer) -> None:
    server = start(metrics_port=0)
    assert server.metrics_port
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        client.record(make_record("a", "await mcp.a()", tools=["a"]))
        client.record(make_record("b", "await mcp.b()", failed_tools=[("b", "down")]))
        with pytest.raises(PmlClientError):
            client.suggest("")
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    assert 'pml_requests_total{code="OK",method="RecordExecution"} 2.0' in text
    assert 'pml_requests_total{code="INVALID_ARGUMENT",method="Suggest"} 1.0' in text
    assert 'pml_captures_total{outcome="saved"} 1.0' in text
    assert 'pml_captures_total{outcome="rejected"} 1.0' in text
    assert 'pml_rejections_total{reason="INVALID_ARGUMENT"} 1.0' in text
    assert 'pml_request_seconds_count{method="RecordExecution"} 2.0' in text


def test_metrics_name_the_running_version(start: StartServer) -> None:
    """docs/operations.md's alert on two versions serving one store reads `pml_version_info`;
    before, /metrics had no such series (the alert could never fire)."""
    from pml_server import __version__

    server = start(metrics_port=0)
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    assert f'pml_version_info{{version="{__version__}"}} 1.0' in text.splitlines()


def test_failed_calls_are_logged_as_json(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    from pml_server.api.logs import JsonFormatter

    caplog.set_level(logging.INFO, logger="pml.rpc")
    server = start()
    with PmlClient(f"127.0.0.1:{server.port}") as client, pytest.raises(PmlClientError):
        client.get_pattern("patterns/missing")
    records = [r for r in caplog.records if r.name == "pml.rpc"]
    assert records
    entry = json.loads(JsonFormatter().format(records[-1]))
    assert entry["code"] == "NOT_FOUND"
    assert entry["method"] == "/pml.v1.PmlService/GetPattern"


def test_reflection_lists_the_services(channel: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    reply = next(stub.ServerReflectionInfo(iter([request]), timeout=5))
    names = {s.name for s in reply.list_services_response.service}
    assert {"pml.v1.PmlService", "grpc.health.v1.Health"} <= names


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate; and
    other.pem, a CA that signed neither."""
    d = tmp_path_factory.mktemp("pki")
    for ca, name in (("ca", "pml-ca"), ("other", "other-ca")):
        _openssl(
            *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", f"/CN={name}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem"),
            cwd=d,
        )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            f"{name}.pem",
            cwd=d,
        )
    return d


def test_tls(start: StartServer, pki: Path) -> None:
    server = start(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    target = f"127.0.0.1:{server.port}"
    with PmlClient(target, root_certificates=pki / "ca.pem") as client:
        assert client.stats().patterns == 0
    with PmlClient(target, timeout=3) as plaintext, pytest.raises(PmlClientError) as err:
        plaintext.stats()
    assert err.value.code is grpc.StatusCode.UNAVAILABLE


def test_a_certificate_the_ca_did_not_sign_is_never_retried(start: StartServer, pki: Path) -> None:
    """A server whose certificate `root_certificates` did not sign: gRPC says UNAVAILABLE, as
    of a server down, so each call was tried `retries` more times (4 handshakes) and an upload
    reconnected until out of reconnects, saying only "failed to connect to all addresses". A
    certificate failure is permanent: one attempt, a CertificateError naming
    `root_certificates` (docs/api.md, Deadlines and retries)."""
    server = start(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    with PmlClient(
        f"127.0.0.1:{server.port}", root_certificates=pki / "other.pem", retries=3
    ) as client:
        sent = count_calls(client._stub, "GetStats")
        with pytest.raises(CertificateError) as err:
            client.stats()
        with pytest.raises(CertificateError) as upload_err:
            client.upload([record], max_reconnects=3)
    assert sent.count == 1
    assert err.value.code is grpc.StatusCode.UNAVAILABLE
    assert err.value.message.startswith("TLS: the server's certificate was not verified (")
    assert "root_certificates must be the PEM of the CA that signed it" in err.value.message
    assert "CERTIFICATE_VERIFY_FAILED" in upload_err.value.message


def test_tls_on_one_side_only_is_said_and_never_retried(
    start: StartServer, pki: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TLS client and a server in plaintext, or the reverse: gRPC says UNAVAILABLE, as of a
    server down, so each call was retried for its 5 s budget and the error named neither side.
    One attempt, a TlsMismatchError saying which side speaks TLS and naming the option, as the
    Go and Node clients do (docs/api.md, Deadlines and retries)."""
    plain = start()
    tls = start(data_dir=tmp_path / "tls", tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    for target, options, speaks in (
        (f"127.0.0.1:{plain.port}", {"root_certificates": pki / "ca.pem"}, False),
        (f"127.0.0.1:{tls.port}", {}, True),
    ):
        with PmlClient(target, retries=3, **options) as client:  # type: ignore[arg-type]
            sent = count_calls(client._stub, "GetStats")
            with pytest.raises(TlsMismatchError) as err:
                client.stats()
        assert sent.count == 1
        assert err.value.code is grpc.StatusCode.UNAVAILABLE
        assert err.value.server_speaks_tls is speaks
        said = (
            "speaks TLS and this client connected in plaintext" if speaks else "does not speak TLS"
        )
        assert err.value.message.startswith(f"TLS: the server {said} (")
        assert "tls=True" in err.value.message
    with pytest.raises(SystemExit) as done:
        cli.main(["stats", "--server", f"127.0.0.1:{tls.port}"])
    assert done.value.code == 3
    printed = " ".join(capsys.readouterr().err.split())
    assert "the server speaks TLS and this client connected in plaintext" in printed
    assert "pass --tls;" in printed


def test_mutual_tls_requires_a_client_certificate(
    start: StartServer, pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start(
        tls_cert=pki / "server.pem", tls_key=pki / "server.key", tls_client_ca=pki / "ca.pem"
    )
    target = f"127.0.0.1:{server.port}"
    with PmlClient(
        target,
        root_certificates=pki / "ca.pem",
        client_cert=pki / "client.pem",
        client_key=pki / "client.key",
    ) as client:
        assert client.stats().patterns == 0
    # Without one, the server closes the handshake and gRPC says only UNAVAILABLE "Socket
    # closed", as of a server gone: each call was retried for its retry budget and the error
    # named nothing. Now the client asks the server (a handshake of its own, in which the
    # server asks for a certificate): one attempt, never retried, naming the options (docs/
    # api.md, Deadlines and retries).
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    with PmlClient(target, root_certificates=pki / "ca.pem", timeout=30) as anonymous:
        sent = count_calls(anonymous._stub, "GetStats")
        with pytest.raises(ClientCertificateError) as err:
            anonymous.stats()
        with pytest.raises(ClientCertificateError) as upload_err:
            anonymous.upload([record], max_reconnects=3)
    assert sent.count == 1
    assert err.value.code is grpc.StatusCode.UNAVAILABLE
    assert err.value.message.startswith(
        "TLS: the server refused the handshake: it asks for a client certificate"
    )
    assert "pass client_cert and client_key" in err.value.message
    assert "pass client_cert and client_key" in upload_err.value.message
    # the CLI without one names its own options
    with pytest.raises(SystemExit) as exit_code:
        cli.main(["stats", "--server", target, "--tls-ca", str(pki / "ca.pem")])
    assert exit_code.value.code == 3
    said = capsys.readouterr().err
    assert "asks for a client certificate" in said
    assert "pass --tls-cert and --tls-key" in said


def test_otlp_http_takes_the_grpc_ports_certificate_and_client_ca(
    start: StartServer, pki: Path
) -> None:
    """`otlp_http_listen` serves HTTPS with the same certificate, and mutual TLS with the same
    client CA: an Export with the client certificate is answered, one without is refused at
    the handshake, and plain HTTP gets nothing."""
    server = start(
        tls_cert=pki / "server.pem",
        tls_key=pki / "server.key",
        tls_client_ca=pki / "ca.pem",
        otlp_http_listen="127.0.0.1:0",
    )
    assert server.otlp_http is not None
    url = f"https://127.0.0.1:{server.otlp_http.port}/v1/traces"
    body = ExportTraceServiceRequest().SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(pki / "client.pem", pki / "client.key")
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        assert answer.status == 200
    anonymous = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(request, context=anonymous, timeout=30).close()
    plain = urllib.request.Request(url.replace("https", "http"), data=body, headers=headers)
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(plain, timeout=30).close()


def test_tls_flags_must_come_in_pairs(start: StartServer, pki: Path) -> None:
    with pytest.raises(ValueError, match="both"):
        start(tls_cert=pki / "server.pem")


def _spawn_pml_serve(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """The `pml` entry point serving a fresh data dir on a free port (hashing embedder); its
    process and target, once it has printed the port it listens on."""
    argv = ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")]
    return spawn_pml_serve(*argv, "--embedder", "hashing", *flags)


def test_pml_serve_starts_reports_healthy_and_stops_on_sigterm(tmp_path: Path) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    proc, target = _spawn_pml_serve(tmp_path, "--metrics-port", "0")
    try:
        with grpc.insecure_channel(target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = None
            for _ in range(200):
                status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    break
                threading.Event().wait(0.05)
            assert status == health_pb2.HealthCheckResponse.SERVING
        with PmlClient(target) as client:
            info = client.server_info()
            assert (info.tenant, info.role) == ("default", "admin")
            assert client.stats().patterns == 0
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr
    messages = [json.loads(line)["msg"] for line in stderr.splitlines() if line.startswith("{")]
    assert "pml serving" in messages
    assert "pml stopped" in messages


def test_pml_serve_entry_point_end_to_end(tmp_path: Path) -> None:
    proc, target = _spawn_pml_serve(tmp_path, "--durability", "fast")
    try:
        with PmlClient(target) as client:
            result = client.record(
                make_record(
                    "Read JSON file", 'await mcp.read_file({path: "a.json"})', tools=["read_file"]
                )
            )
            assert result.new_pattern
            assert client.suggest("Read JSON file").suggestions[0].capability == result.capability
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr[-5000:]


def test_pml_serve_dumps_every_threads_traceback_on_sigusr1(tmp_path: Path) -> None:
    """Where a server that seems stuck is: SIGUSR1 writes each thread's stack to stderr, and
    the server goes on serving."""
    proc, target = _spawn_pml_serve(tmp_path, "--durability", "fast")
    try:
        proc.send_signal(signal.SIGUSR1)
        with PmlClient(target) as client:
            assert client.stats().patterns == 0
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr[-5000:]
    assert "Current thread" in stderr, stderr[-5000:]
    assert "serve_forever" in stderr, stderr[-5000:]


def test_pml_serve_keeps_serving_when_the_reader_of_its_stdout_is_gone(tmp_path: Path) -> None:
    """A script that starts `pml serve` and closes its end of the pipe before the "listening"
    line: the print met a broken pipe, and the server ended with exit 2 before serving."""
    import os
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    read_end, write_end = os.pipe()
    os.close(read_end)
    pml = Path(sys.executable).parent / "pml"
    argv = [str(pml), "serve", "--listen", f"127.0.0.1:{port}", "--embedder", "hashing"]
    proc = subprocess.Popen(
        [*argv, "--data-dir", str(tmp_path / "d")],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    try:
        with PmlClient(f"127.0.0.1:{port}", timeout=5) as client:
            for _ in range(600):
                if proc.poll() is not None:
                    break
                try:
                    assert client.stats().patterns == 0
                    break
                except PmlClientError:
                    threading.Event().wait(0.1)
        assert proc.poll() is None, "pml serve ended"
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr


def test_tls_files_that_are_no_certificate_or_key_are_named(
    start: StartServer, pki: Path, tmp_path: Path
) -> None:
    """A certificate file that is no PEM certificate, a key that is not the certificate's, a
    client CA that holds no certificate, a file that cannot be read: each refused naming the
    flag and the file (before: gRPC logged "Invalid cert chain file" and the start failed with
    "could not bind 127.0.0.1:0: Failed to bind to address", naming neither)."""
    text = tmp_path / "notes.txt"
    text.write_text("not a certificate\n")
    cert, key = pki / "server.pem", pki / "server.key"
    cases = [
        ({"tls_cert": text, "tls_key": key}, f"--tls-cert {text}: no PEM certificate"),
        ({"tls_cert": cert, "tls_key": text}, f"--tls-key {text}: not the private key of"),
        (
            {"tls_cert": cert, "tls_key": pki / "client.key"},
            f"--tls-key {pki / 'client.key'}: not the private key of --tls-cert {cert} (key "
            "values mismatch)",
        ),
        (
            {"tls_cert": cert, "tls_key": key, "tls_client_ca": text},
            f"--tls-client-ca {text}: no PEM certificate",
        ),
        (
            {"tls_cert": tmp_path / "gone.pem", "tls_key": key},
            f"--tls-cert {tmp_path / 'gone.pem'}: cannot read it: No such file or directory",
        ),
    ]
    for files, said in cases:
        with pytest.raises(ValueError, match=r"^--tls-") as refused:
            start(**files)
        assert str(refused.value).startswith(said), refused.value
        assert "\n" not in str(refused.value)
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "pml"),
            *("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")),
            *("--embedder", "hashing", "--tls-cert", str(text), "--tls-key", str(key)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"pml serve: error: --tls-cert {text}: no PEM certificate\n",
    )
