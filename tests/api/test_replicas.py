"""Real `pml serve` replicas over one PostgreSQL database (throwaway clusters): a capture on one
is suggested by the other; SIGKILL of a replica loses no acknowledged write while the other
keeps serving, and captures resent to the other under their request ids count once;
PostgreSQL killed and restarted under load gives UNAVAILABLE with RetryInfo (never INTERNAL or
UNKNOWN) and the replicas recover by themselves; a database unreachable at start is a clear
error that names the host, never the password."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pml_server.client import PmlClient, PmlClientError, make_record
from testing.postgres_cluster import PostgresCluster, free_port
from tests.conftest import StartServer
from tests.support import eventually, open_engine
from tests.support import make_record as engine_record

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 30.0


class Replica:
    def __init__(self, data_dir: Path, dsn: str) -> None:
        env = {**os.environ, "PML_STORE": dsn}  # the DSN in the environment, as documented
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "pml_server.cli", "serve", "--listen", "127.0.0.1:0",
                "--data-dir", str(data_dir), "--embedder", "hashing", "--log-format", "json",
            ],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"\(port (\d+)\)", line)
        assert match, f"no port announced: {line!r}"
        self.target = f"127.0.0.1:{match.group(1)}"
        wait_serving(self.target)

    def client(self, retries: int = 3) -> PmlClient:
        return PmlClient(self.target, timeout=20, retries=retries)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def wait_serving(target: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    with PmlClient(target, timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                client.suggest("warm up")
                return
            except PmlClientError as err:
                if err.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                time.sleep(0.1)
    raise AssertionError(f"{target} never became ready")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.stop()


def start(spawned: list[Replica], root: Path, dsn: str) -> Replica:
    replica = Replica(root / f"replica{len(spawned)}", dsn)
    spawned.append(replica)
    return replica


def job(w: int, i: int) -> object:
    """Writer `w`'s capture `i`: one pattern per writer (the path is a parameter)."""
    code = f'await mcp.job_{w}({{path: "n{i}.json"}})'
    return make_record(f"job {w}", code, tools=[f"job_{w}"], request_id=f"w{w}-{i}")


def usage_by_pattern(client: PmlClient) -> dict[str, int]:
    usage: dict[str, int] = {}
    token = ""
    while True:
        page = client.list_patterns(page_size=100, page_token=token)
        usage.update({p.name: p.usage_count for p in page.patterns})
        if not (token := page.next_page_token):
            return usage


def test_a_capture_on_one_replica_is_suggested_by_the_other(
    spawn: list[Replica],
    tmp_path: Path,
    postgres_dsn: str,
) -> None:
    a, b = start(spawn, tmp_path, postgres_dsn), start(spawn, tmp_path, postgres_dsn)
    with a.client() as on_a, b.client() as on_b:
        on_a.record(make_record("Read a JSON file", "await mcp.read_json(p)", tools=["read_json"]))
        began = time.monotonic()
        while not on_b.suggest("Read a JSON file").suggestions:
            assert time.monotonic() - began < 10, "not suggested by the other replica in 10 s"
            time.sleep(0.02)
        [suggestion] = on_b.suggest("Read a JSON file").suggestions
        assert suggestion.pattern.usage_count == 1


def test_8_writers_through_2_servers_count_one_pattern_exactly(
    spawn: list[Replica], tmp_path: Path, postgres_dsn: str
) -> None:
    """docs/storage.md, A capture is one transaction: 8 threads capture one pattern through
    two real servers (4 each; a fifth of the runs fail, and intents count the successes; half
    the runs give a second intent text), with Suggests on both caching its view meanwhile.
    Both servers then show the exact counts, in GetPattern (read from the database) and in
    Suggest (their view caches)."""
    servers = [start(spawn, tmp_path, postgres_dsn), start(spawn, tmp_path, postgres_dsn)]
    code = 'await mcp.read_json({path: "a.json"})'
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with servers[w % 2].client() as client:
                for i in range(25):
                    intent = "Read a JSON file" if i % 2 else "Load the JSON document"
                    failed = [("read_json", "boom")] if i % 5 == 4 else []
                    tools = [] if failed else ["read_json"]
                    client.record(
                        make_record(intent, code, tools=tools, failed_tools=failed,
                                    request_id=f"w{w}-{i}")
                    )  # fmt: skip
                    client.suggest("Read a JSON file")
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    for server in servers:
        with server.client() as client:
            [name] = usage_by_pattern(client)
            pattern = client.get_pattern(name)
            assert (pattern.usage_count, pattern.success_count) == (200, 160)
            assert sorted(i.hit_count for i in pattern.intents) == [80, 80]
            assert client.stats().executions == 200

            def shown() -> tuple[int, int, list[int]]:
                [s] = client.suggest("Read a JSON file").suggestions
                hits = sorted(i.hit_count for i in s.pattern.intents)
                return s.pattern.usage_count, s.pattern.success_count, hits

            deadline = time.monotonic() + WAIT_SECONDS
            while shown() != (200, 160, [80, 80]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert shown() == (200, 160, [80, 80])


@pytest.mark.slow
def test_sigkill_of_a_replica_loses_no_acknowledged_write(
    spawn: list[Replica],
    tmp_path: Path,
    postgres_dsn: str,
) -> None:
    a, b = start(spawn, tmp_path, postgres_dsn), start(spawn, tmp_path, postgres_dsn)
    acked: dict[int, int] = dict.fromkeys(range(4), 0)
    killed = threading.Event()
    lock = threading.Lock()
    b_errors: list[PmlClientError] = []

    def writer(w: int, replica: Replica) -> None:
        with replica.client() as client:
            for i in range(120):
                try:
                    client.record(job(w, i))
                except PmlClientError as err:
                    if replica is b:
                        b_errors.append(err)
                    return
                with lock:
                    acked[w] += 1
                    if sum(acked.values()) >= 80 and not killed.is_set():
                        killed.set()
                        a.proc.send_signal(signal.SIGKILL)

    threads = [threading.Thread(target=writer, args=(w, a if w < 2 else b)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert killed.is_set()
    assert b_errors == []  # the other replica kept serving
    assert acked[2] == acked[3] == 120
    with b.client() as client:
        counted = usage_by_pattern(client)
    # never fewer than acknowledged; at most one more per writer of the killed replica (a
    # capture committed whose answer died with the process: what request ids are for)
    assert sum(acked.values()) <= sum(counted.values()) <= sum(acked.values()) + 2
    # the killed replica comes back with everything, its own acknowledged writes included
    again = start(spawn, tmp_path, postgres_dsn)
    with again.client() as client:
        assert sum(usage_by_pattern(client).values()) == sum(counted.values())


@pytest.mark.slow
def test_captures_resent_to_the_other_replica_after_a_sigkill_count_exactly(
    spawn: list[Replica],
    tmp_path: Path,
    postgres_dsn: str,
) -> None:
    """A replica killed mid-capture (SIGKILL after 100 acknowledgements): each writer resends
    the capture it was refused to the other replica, with its request id, and goes on there.
    Every request id then counts exactly once (a capture the killed replica committed without
    answering is replayed, not counted again); the killed replica, started again on its data
    directory, shows the same and replays every id (a tried run: 3 captures resent)."""
    a, b = start(spawn, tmp_path, postgres_dsn), start(spawn, tmp_path, postgres_dsn)
    acked: set[str] = set()
    lock = threading.Lock()
    killed = threading.Event()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with a.client(retries=0) as on_a, b.client() as on_b:
                for i in range(60):
                    record = job(w, i)
                    try:
                        (on_b if killed.is_set() else on_a).record(record)
                    except PmlClientError:
                        on_b.record(record)  # the same request id, to the other replica
                    with lock:
                        acked.add(record.request_id)
                        if len(acked) >= 100 and not killed.is_set():
                            killed.set()
                            a.proc.send_signal(signal.SIGKILL)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert errors == []
    assert killed.is_set()
    assert len(acked) == 240
    with b.client() as client:
        assert sum(usage_by_pattern(client).values()) == 240
    a.stop()
    again = Replica(tmp_path / "replica0", postgres_dsn)  # the killed one's data directory
    spawn.append(again)
    with again.client() as client:
        assert sum(usage_by_pattern(client).values()) == 240
        assert all(client.record(job(w, i)).replayed for w in range(4) for i in range(0, 60, 7))
        assert sum(usage_by_pattern(client).values()) == 240


@pytest.mark.slow
def test_postgres_restarted_under_load_gives_unavailable_and_replicas_recover(
    spawn: list[Replica], tmp_path: Path, own_postgres_cluster: PostgresCluster
) -> None:
    dsn = own_postgres_cluster.create_database()
    replicas = [start(spawn, tmp_path, dsn), start(spawn, tmp_path, dsn)]
    per_writer = 60
    codes: list[grpc.StatusCode] = []
    without_retry_info: list[str] = []
    lock = threading.Lock()
    progress = threading.Event()
    done = [0]

    def writer(w: int) -> None:
        # retries=0: this loop retries itself, counting every refusal the restart causes
        with replicas[w % 2].client(retries=0) as client:
            for i in range(per_writer):
                while True:  # retried with the same request id until acknowledged
                    try:
                        client.record(job(w, i))
                        break
                    except PmlClientError as err:
                        with lock:
                            codes.append(err.code)
                            if err.retry_delay_seconds is None:
                                without_retry_info.append(err.message)
                        time.sleep(0.2)
                with lock:
                    done[0] += 1
                    if done[0] >= 40:
                        progress.set()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    assert progress.wait(60)
    own_postgres_cluster.stop("immediate")
    time.sleep(1.0)
    own_postgres_cluster.start()
    for thread in threads:
        thread.join(180)
    assert not any(thread.is_alive() for thread in threads)
    assert codes, "the restart was not seen by any call"
    assert set(codes) <= {grpc.StatusCode.UNAVAILABLE}, codes
    assert without_retry_info == []
    print(f"PostgreSQL restart: {len(codes)} calls refused UNAVAILABLE, all with RetryInfo")
    # every capture applied exactly once: retries of a committed one were replayed
    for replica in replicas:
        with replica.client() as client:
            assert sorted(usage_by_pattern(client).values()) == [per_writer] * 4
        wait_serving(replica.target)


def _serve_exit(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pml_server.cli", "serve", "--listen", "127.0.0.1:0",
         "--embedder", "hashing", *flags],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_an_unreachable_database_at_start_names_the_host_never_the_password(
    tmp_path: Path,
) -> None:
    port = free_port()
    dsn = f"postgresql://pml:s3cret-pw@127.0.0.1:{port}/pml"
    done = _serve_exit({"PML_STORE": dsn}, "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port}/pml" in done.stderr
    assert "s3cret-pw" not in done.stderr + done.stdout


def test_a_password_on_the_command_line_is_refused(tmp_path: Path) -> None:
    done = _serve_exit({}, "--data-dir", str(tmp_path), "--store", "postgresql://u:pw@h/db")
    assert done.returncode == 2
    assert "PML_STORE" in done.stderr


def test_the_store_comes_from_the_flag_or_pml_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from pml_server import cli
    from pml_server.config import serve_config

    monkeypatch.setenv("PML_STORE", "postgresql://pml@db.internal:5432/pml")
    config = serve_config(cli.build_parser().parse_args(["serve", "--pool-size", "3"])).engine
    assert (config.store, config.pool_size) == ("postgresql://pml@db.internal:5432/pml", 3)
    flagged = cli.build_parser().parse_args(["serve", "--store", "postgresql://other/db"])
    assert serve_config(flagged).engine.store == "postgresql://other/db"
    monkeypatch.delenv("PML_STORE")
    assert serve_config(cli.build_parser().parse_args(["serve"])).engine.store is None


def test_a_follower_that_meets_an_entry_it_cannot_read_survives_and_health_says_so(
    start: StartServer,
    postgres_dsn: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An op log entry this build cannot read (written straight into PostgreSQL: a newer
    build's, a damaged row) ended the follower's thread with nothing logged but its traceback:
    the replica went on serving stale data, SERVING. The follower now survives any error: it
    logs it (clipped), counts it, backs off, and health says NOT_SERVING while it is stalled;
    the entry removed, it rebuilds what it missed and health says SERVING again."""
    server = start(store=postgres_dsn)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        check = health_pb2_grpc.HealthStub(channel).Check

        def status() -> int:
            return check(health_pb2.HealthCheckRequest(service=""), timeout=10).status

        assert eventually(lambda: status() == health_pb2.HealthCheckResponse.SERVING)
        other = open_engine(tmp_path / "other", store=postgres_dsn)
        try:
            other.record("default", engine_record("r1", "Read JSON file", ["fs.read"]))
            caplog.set_level(logging.WARNING, logger="pml_server.replication._follower")
            with psycopg.connect(postgres_dsn, autocommit=True) as db:
                row = db.execute("SELECT seq FROM pml_oplog_head WHERE tenant = 'default'")
                (head,) = row.fetchone() or (0,)
                db.execute(
                    "INSERT INTO pml_oplog (tenant, seq, op) VALUES ('default', %s, %s)",
                    (head + 1, b"\xff" + b"x" * 1_000_000),
                )
                db.execute(
                    "UPDATE pml_oplog_head SET seq = %s WHERE tenant = 'default'", (head + 1,)
                )
            assert eventually(lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING)
            lag = server.engine.admin.follower_lag()  # type: ignore[attr-defined]
            assert lag.errors >= 1
            assert lag.stalled is not None
            assert "UnicodeDecodeError" in lag.stalled
            stalled = [r.getMessage() for r in caplog.records if "follower stalled" in r.msg]
            assert stalled
            assert max(len(line) for line in stalled) < 1000
            with psycopg.connect(postgres_dsn, autocommit=True) as db:
                db.execute(
                    "DELETE FROM pml_oplog WHERE tenant = 'default' AND seq = %s", (head + 1,)
                )
            assert eventually(lambda: status() == health_pb2.HealthCheckResponse.SERVING, 60)
            saved = other.record("default", engine_record("r2", "Send the mail", ["mail.send"]))
            with PmlClient(f"127.0.0.1:{server.port}") as client:

                def suggested() -> list[str]:
                    answer = client.suggest("Send the mail").suggestions
                    return [s.pattern.name.rsplit("/", 1)[-1] for s in answer]

                assert eventually(lambda: saved.pattern_id in suggested())
        finally:
            other.close()
