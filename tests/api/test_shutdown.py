"""Graceful shutdown: NOT_SERVING, in-flight calls drained, captures flushed before the store
closes, and no acknowledged write lost (checked by reopening the data directory)."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc

from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.config import config_of
from tests.conftest import StartServer
from tests.support import open_engine


def test_shutdown_loses_no_acknowledged_write(start: StartServer, data_dir: Path) -> None:
    server = start()
    target = f"127.0.0.1:{server.port}"
    acked: list[tuple[str, str]] = []
    errors: list[grpc.StatusCode] = []
    lock = threading.Lock()
    halfway = threading.Event()

    def writer(w: int) -> None:
        with PmlClient(target, timeout=10) as client:
            for i in range(200):
                record = make_record(
                    f"task {w} {i}", f"await mcp.t({w}, {i})", tools=["t"], request_id=f"w{w}-{i}"
                )
                try:
                    result = client.record(record)
                except PmlClientError as err:
                    with lock:
                        errors.append(err.code)
                    return
                with lock:
                    acked.append((record.request_id, result.pattern))
                    if len(acked) >= 100:
                        halfway.set()

    def streamer() -> None:
        records = [
            make_record(f"s {i}", f"await mcp.s({i})", tools=["s"], request_id=f"s-{i}")
            for i in range(300)
        ]
        with PmlClient(target, timeout=10) as client:
            try:
                for ack in client.upload(records, max_reconnects=0).acks.values():
                    with lock:
                        acked.append((ack.execution_id, ack.result.pattern))
            except PmlClientError as err:
                with lock:
                    errors.append(err.code)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    threads.append(threading.Thread(target=streamer))
    for t in threads:
        t.start()
    assert halfway.wait(30)
    server.stop(grace=5.0)
    for t in threads:
        t.join(30)
    # Refusals during shutdown are retryable, never a server error.
    assert set(errors) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    config = config_of(data_dir=data_dir, embedder="hashing", durability="fast")
    engine = open_engine(config)
    try:
        for request_id, pattern in acked:
            view = engine.get_pattern("default", pattern.removeprefix("patterns/"))
            assert view.usage_count >= 1, request_id
        assert engine.stats("default").executions >= len(acked)
    finally:
        engine.close()
    print(f"shutdown test: {len(acked)} acknowledged writes, all found after reopening")
