"""Hostile races over two replicas on one PostgreSQL database, each a real gRPC server on port
0 (in-process), clients in threads: a user's deletion or retention's auto-removal on one replica
racing captures on the other, and one batch of request ids streamed to both at once. What must
hold (docs/storage.md, The shared store): each surviving pattern counts exactly the acknowledged
captures that name it, every acknowledged request id replays (naming its pattern while that
survives) and counts nothing again, and the tenant's stats agree with what is left."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from pml_server.api.server import RunningServer
from pml_server.client import (
    CaptureResult,
    ExecutionRecord,
    PmlClient,
    PmlClientError,
    make_record,
)
from pml_server.retention import RetentionConfig
from tests.conftest import StartServer

CODE = 'await mcp.read_json({path: "a.json"})'

Acked = list[tuple[ExecutionRecord, CaptureResult]]  # (record sent, its acknowledged answer)


def _replicas(
    start: StartServer, tmp_path: Path, dsn: str, **settings: object
) -> list[RunningServer]:
    return [start(data_dir=tmp_path / name, store=dsn, **settings) for name in ("a", "b")]


def _client(server: RunningServer) -> PmlClient:
    return PmlClient(f"127.0.0.1:{server.port}", timeout=30)


def _race(captures: list[Callable[[], None]], meanwhile: Callable[[threading.Event], None]) -> None:
    """Run the capture threads to their end while `meanwhile` loops on until they are done;
    any error of either is raised."""
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as error:  # reported below
                errors.append(error)

        return run

    other = threading.Thread(target=guarded(lambda: meanwhile(done)))
    threads = [threading.Thread(target=guarded(work)) for work in captures]
    other.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done.set()
    other.join(120)
    assert errors == []


def _capturing(
    server: RunningServer, records: Iterator[ExecutionRecord], acked: Acked
) -> Callable[[], None]:
    lock = threading.Lock()

    def work() -> None:
        with _client(server) as client:
            for record in records:
                answer = client.record(record)
                with lock:
                    acked.append((record, answer))

    return work


def _check_exact(servers: list[RunningServer], acked: Acked) -> None:
    """On each replica: every surviving pattern counts the acknowledged answers naming it,
    every acknowledged request id replays without counting again, the stats agree."""
    naming = Counter(answer.pattern for _, answer in acked)
    for server in servers:
        with _client(server) as client:
            survivors = {
                p.name: p.usage_count for p in client.list_patterns(page_size=100).patterns
            }
            assert survivors == {name: naming[name] for name in survivors}
            for record, answer in acked[::5]:
                again = client.record(record)
                assert again.replayed
                named = answer.pattern
                assert again.pattern == (named if named in survivors else "")
            after = {p.name: p.usage_count for p in client.list_patterns(page_size=100).patterns}
            assert after == survivors
            stats = client.stats()
            assert stats.patterns == len(survivors)
            assert stats.intents == sum(len(client.get_pattern(n).intents) for n in survivors)
            assert stats.capabilities == len(client.list_capabilities(page_size=100).capabilities)


def test_deletions_on_one_replica_racing_captures_on_both_lose_no_count(
    start: StartServer, tmp_path: Path, postgres_dsn: str
) -> None:
    """Replica a deletes the tenant's patterns over and over while 4 clients capture one code
    through both replicas (160 captures; a tried run: 22 to 25 deletions a run)."""
    servers = _replicas(start, tmp_path, postgres_dsn)
    acked: Acked = []

    def records(w: int) -> Iterator[ExecutionRecord]:
        for i in range(40):
            yield make_record(
                f"Read a JSON file {i % 3}", CODE, tools=["read_json"], request_id=f"w{w}-{i}"
            )

    def delete(done: threading.Event) -> None:
        with _client(servers[0]) as client:
            while not done.is_set():
                for pattern in client.list_patterns(page_size=10).patterns:
                    try:
                        client.delete_pattern(pattern.name)
                    except PmlClientError as error:
                        if error.code.name != "NOT_FOUND":  # deleted since listed: a retry
                            raise

    _race([_capturing(servers[w % 2], records(w), acked) for w in range(4)], delete)
    assert len(acked) == 160
    _check_exact(servers, acked)


def test_retention_on_one_replica_racing_captures_on_the_other_loses_no_count(
    start: StartServer, tmp_path: Path, postgres_dsn: str
) -> None:
    """Replica a applies retention with auto-removal over and over while 4 clients capture,
    through replica b, two codes failing 83 to 88% of their runs: each pattern is removed
    once it fails enough and made again by its next success (a tried run: 13 to 16 patterns
    in all, 150 to 250 retention runs)."""
    retention = RetentionConfig(auto_remove=True, min_tries=4)
    servers = _replicas(start, tmp_path, postgres_dsn, retention=retention)
    acked: Acked = []

    def records(w: int) -> Iterator[ExecutionRecord]:
        tool = f"t{w % 2}"
        for i in range(50):
            ok = i % (8 if w < 2 else 6) == 0
            yield make_record(
                f"do {w % 2}",
                f'await mcp.{tool}({{path: "n{i}.json"}})',
                tools=[tool] if ok else [],
                failed_tools=[] if ok else [(tool, "boom")],
                request_id=f"w{w}-{i}",
            )

    def apply_retention(done: threading.Event) -> None:
        with _client(servers[0]) as client:
            while not done.is_set():
                client.run_retention(apply=True)

    _race([_capturing(servers[1], records(w), acked) for w in range(4)], apply_retention)
    assert len(acked) == 200
    assert len({answer.pattern for _, answer in acked}) > 2
    _check_exact(servers, acked)


def test_one_batch_of_request_ids_streamed_to_both_replicas_at_once_applies_once(
    start: StartServer, tmp_path: Path, postgres_dsn: str
) -> None:
    """4 uploads (StreamTraces, batches of 8), two through each replica, of the same 60
    request ids in different orders, started together: each id is applied once, and every
    acknowledgement of it is the same answer (one `replayed=False`)."""
    servers = _replicas(start, tmp_path, postgres_dsn)
    barrier = threading.Barrier(4)
    acks: dict[str, list[CaptureResult]] = {}
    lock = threading.Lock()

    def records(w: int) -> Iterator[ExecutionRecord]:
        for i in range(60):
            k = (i + w * 7) % 60
            failed = [("job", "boom")] if k % 5 == 4 else []
            yield make_record(
                f"job {k % 3}",
                f'await mcp.job_{k % 3}({{path: "n{k}.json"}})',
                tools=[] if failed else [f"job_{k % 3}"],
                failed_tools=failed,
                request_id=f"id-{k}",
            )

    def upload(w: int) -> Callable[[], None]:
        def work() -> None:
            with _client(servers[w % 2]) as client:
                barrier.wait()
                report = client.upload(records(w), batch=8)
            with lock:
                for execution_id, ack in report.acks.items():
                    assert ack.WhichOneof("outcome") == "result", ack
                    acks.setdefault(execution_id, []).append(ack.result)

        return work

    _race([upload(w) for w in range(4)], lambda done: None)
    assert sorted(acks) == sorted(f"id-{k}" for k in range(60))
    for answers in acks.values():
        assert len(answers) == 4
        assert sum(not a.replayed for a in answers) == 1
        shapes = set()
        for answer in answers:
            told = CaptureResult()
            told.CopyFrom(answer)
            told.replayed = False
            shapes.add(told.SerializeToString(deterministic=True))
        assert len(shapes) == 1
    for server in servers:
        with _client(server) as client:
            stats = client.stats()
            assert stats.executions + stats.rejected == 60
            usage = sum(p.usage_count for p in client.list_patterns(page_size=100).patterns)
            assert usage == stats.executions
