"""Per-tenant quotas and the server-wide concurrency limit answer RESOURCE_EXHAUSTED, and a
tenant over its quota does not block its neighbour."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.api.admission.quotas import (
    ACTIVE_SECONDS,
    CONCURRENCY_RETRY_SECONDS,
    COST_RETRY_SECONDS,
    CPU_BURST_SECONDS,
    CPU_SHARE,
    TenantQuotas,
)
from pml_server.api.admission.refusal import RefusalPool
from pml_server.api.errors import PUSHBACK_TRAILER
from pml_server.api.security.auth import KeyStore, Role
from pml_server.client import PmlClient, PmlClientError, make_record, resources_pb2
from pml_server.domain.errors import ResourceExhaustedError
from tests.conftest import StartServer
from tests.support import count_calls


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_concurrency_quota_is_per_tenant() -> None:
    quotas = TenantQuotas(max_in_flight=2)
    with quotas.hold("a"), quotas.hold("a"):
        with pytest.raises(ResourceExhaustedError), quotas.hold("a"):
            pass
        with quotas.hold("b"):
            pass
    with quotas.hold("a"), quotas.hold("a"):  # slots come back
        pass


def test_rate_quota_refills_with_time() -> None:
    clock = FakeClock()
    quotas = TenantQuotas(max_in_flight=100, rate_per_second=2.0, burst=3, clock=clock)
    for _ in range(3):
        with quotas.hold("a"):
            pass
    with pytest.raises(ResourceExhaustedError, match="rate"), quotas.hold("a"):
        pass
    with quotas.hold("b"):  # another tenant has its own bucket
        pass
    clock.now += 0.5  # one token back
    with quotas.hold("a"):
        pass
    with pytest.raises(ResourceExhaustedError), quotas.hold("a"):
        pass


def _open_stream(client: PmlClient, release: threading.Event, name: str) -> threading.Thread:
    """A StreamTraces call that stays open until `release` is set; returns once the server has
    acknowledged its first execution (so the call is surely in progress there)."""
    opened = threading.Event()

    def requests() -> Iterator[pml_pb2.StreamTracesRequest]:
        record = make_record(f"hold {name}", f"await mcp.hold_{name}()", tools=["hold"])
        yield pml_pb2.StreamTracesRequest(execution_id=name, sequence=1, record=record)
        release.wait(30)

    def consume() -> None:
        for _ in client.stream(requests()):
            opened.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    assert opened.wait(30), "the stream never opened"
    return thread


@contextlib.contextmanager
def _streams_held(client: PmlClient, count: int = 2) -> Iterator[None]:
    """`count` StreamTraces calls of `client` kept open (each holding a call slot) inside the
    block, closed and joined at its end."""
    release = threading.Event()
    threads = [_open_stream(client, release, f"s{i}") for i in range(count)]
    try:
        yield
    finally:
        release.set()
        for t in threads:
            t.join(10)


def _exhausted(call: object) -> PmlClientError:
    assert callable(call)
    with pytest.raises(PmlClientError) as err:
        call()
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    return err.value


def test_a_tenant_over_its_quota_does_not_block_its_neighbour(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    server = start(keys_file=path, tenant_max_in_flight=2)
    target = f"127.0.0.1:{server.port}"
    with (
        PmlClient(target, api_key=found["acme-write"], retries=0) as acme,
        PmlClient(target, api_key=found["globex-admin"]) as globex,
    ):
        with _streams_held(acme):
            err = _exhausted(acme.stats)
            assert "tenant" in err.message
            assert globex.stats().patterns == 0  # the neighbour is served
        assert acme.stats().patterns == 2  # slots are given back


def test_server_wide_concurrency_limit(start: StartServer) -> None:
    server = start(max_concurrent_rpcs=2)
    with PmlClient(f"127.0.0.1:{server.port}", retries=0) as client, _streams_held(client):
        _exhausted(client.stats)


def test_a_call_refused_by_the_concurrency_limit_is_retried(start: StartServer) -> None:
    """grpcio refuses a call over `--max-concurrent-rpcs` RESOURCE_EXHAUSTED "Concurrent RPC
    limit exceeded!" before any handler, so without RetryInfo: the client took it for a size
    limit and never retried, so 300 records sent at once by one client lost those over the
    limit. It is a busy server: retried like UNAVAILABLE. The first attempt is refused (the
    two slots held); the slots are given back before the second, which is answered."""
    server = start(max_concurrent_rpcs=2)
    record = make_record("Read JSON", "await mcp.read_file({path: 'a'})", tools=["read_file"])
    with PmlClient(f"127.0.0.1:{server.port}", retries=3) as client:
        release = threading.Event()
        holders = [_open_stream(client, release, f"s{i}") for i in range(2)]

        def release_before_the_second(attempt: int) -> None:
            if attempt == 2:
                release.set()
                for t in holders:
                    t.join(10)

        attempts = count_calls(client._stub, "RecordExecution", release_before_the_second)
        assert client.record(record).outcome == resources_pb2.CAPTURE_OUTCOME_SAVED
        assert attempts.count == 2
        assert client.stats().executions == 3  # the two holders' and this one


def test_refusal_is_peeked_without_the_lock() -> None:
    clock = FakeClock()
    quotas = TenantQuotas(max_in_flight=1, rate_per_second=1.0, burst=1, clock=clock)
    assert quotas.refusal("a") is None
    with quotas.hold("a"):
        assert quotas.refusal("a") is quotas.too_many_in_flight
        assert quotas.refusal("b") is None
    assert quotas.refusal("a") is quotas.over_rate  # its one token is spent
    clock.now += 1.0
    assert quotas.refusal("a") is None
    assert quotas.too_many_in_flight.retry_after_seconds == CONCURRENCY_RETRY_SECONDS
    assert quotas.over_rate.retry_after_seconds == 1.0


def test_reaching_the_limit_beside_a_neighbour_means_waiting_the_retry_delay() -> None:
    clock = FakeClock()
    quotas = TenantQuotas(max_in_flight=1, clock=clock)
    with quotas.hold("a"):  # alone on the server: refused at the limit, nothing more
        assert quotas.refusal("a") is quotas.too_many_in_flight
    assert quotas.refusal("a") is None
    with quotas.hold("b"):  # a neighbour is active from now on
        pass
    with quotas.hold("a"):
        assert quotas.refusal("a") is quotas.too_many_in_flight  # starts the wait
    assert quotas.refusal("a") is quotas.too_many_in_flight  # a slot is free, but it must wait
    with pytest.raises(ResourceExhaustedError, match="retry"), quotas.hold("a"):
        pass
    assert quotas.refusal("b") is None  # the neighbour is not touched
    clock.now += CONCURRENCY_RETRY_SECONDS
    assert quotas.refusal("a") is None
    with quotas.hold("a"):
        pass
    clock.now += ACTIVE_SECONDS  # the neighbour has been idle long enough
    with quotas.hold("a"):
        assert quotas.refusal("a") is quotas.too_many_in_flight
    assert quotas.refusal("a") is None


def test_key_store_resolves_tenants_without_raising(keys: tuple[Path, dict[str, str]]) -> None:
    path, found = keys
    store = KeyStore.load(path)
    bearer = (("authorization", f"Bearer {found['globex-admin']}"),)
    assert store.tenant_of(bearer) == "globex"
    assert store.tenant_of(bearer) == "globex"  # the cached key
    assert store.authenticate(bearer).role is Role.ADMIN
    assert store.tenant_of((("authorization", "Bearer pml_unknown"),)) is None
    assert store.tenant_of(()) is None
    assert KeyStore.load(None).tenant_of(()) == "default"


def test_refusal_tells_the_client_when_to_retry(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    server = start(keys_file=path, tenant_max_in_flight=2)
    target = f"127.0.0.1:{server.port}"
    with PmlClient(target, api_key=found["acme-write"], retries=0) as acme, _streams_held(acme):
        err = _exhausted(acme.stats)
        assert err.retry_delay_seconds == CONCURRENCY_RETRY_SECONDS
        record = make_record("one more", "await mcp.more()", tools=["more"])
        more = [pml_pb2.StreamTracesRequest(execution_id="s9", sequence=1, record=record)]
        err = _exhausted(lambda: list(acme.stream(more)))  # a stream is refused too
        assert err.retry_delay_seconds == CONCURRENCY_RETRY_SECONDS
        with grpc.insecure_channel(target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            metadata = (("authorization", f"Bearer {found['acme-write']}"),)
            with pytest.raises(grpc.RpcError) as raw:
                stub.GetStats(pml_pb2.GetStatsRequest(), metadata=metadata, timeout=10)
        trailers = dict(raw.value.trailing_metadata())  # type: ignore[attr-defined]
        assert trailers[PUSHBACK_TRAILER] == str(round(CONCURRENCY_RETRY_SECONDS * 1000))
    refused = server.metrics.registry.get_sample_value(
        "pml_requests_total", {"method": "GetStats", "code": "RESOURCE_EXHAUSTED"}
    )
    assert refused == 2


def test_refusal_needs_no_rpc_thread(start: StartServer, keys: tuple[Path, dict[str, str]]) -> None:
    """Both RPC threads are taken by the tenant's open streams: a further call of that tenant is
    still answered (RESOURCE_EXHAUSTED, not a wait for a thread until its deadline)."""
    path, found = keys
    server = start(keys_file=path, max_workers=2, tenant_max_in_flight=2, max_streams=2)
    target = f"127.0.0.1:{server.port}"
    with (
        PmlClient(target, api_key=found["acme-write"], timeout=10, retries=0) as acme,
        _streams_held(acme),
    ):
        for _ in range(20):
            _exhausted(acme.stats)


def test_refusal_pool_counts_the_calls_waiting_for_a_thread() -> None:
    pool = RefusalPool(1, thread_name_prefix="test-refuse")
    release = threading.Event()
    try:
        running = pool.submit(release.wait, 10)
        queued = [pool.submit(lambda i=i: i) for i in range(3)]
        assert pool.waiting >= 3  # the first may not have started yet
        release.set()
        assert [f.result(10) for f in queued] == [0, 1, 2]
        assert running.result(10) is True
        assert pool.waiting == 0
    finally:
        release.set()
        pool.shutdown(wait=True)


def _burn_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_tenant_over_its_cpu_share_waits_while_a_neighbour_is_active() -> None:
    """Admission by cost: a call that took more CPU time than the burst puts its tenant in debt;
    while a neighbour is active its concurrent calls are refused (a count limit would let them
    in), one call at a time and alone it is not, and the debt drains at CPU_SHARE a second."""
    now = [0.0]
    quotas = TenantQuotas(max_in_flight=8, clock=lambda: now[0])
    with quotas.hold("heavy"):
        _burn_cpu(CPU_BURST_SECONDS * 2)
    with quotas.hold("heavy"), quotas.hold("heavy"):  # alone: nobody else needs the time
        pass
    with quotas.hold("light"), quotas.hold("heavy"):  # one at a time: admitted
        assert quotas.refusal("light") is None
        assert quotas.refusal("heavy") is quotas.over_cost  # a concurrent one is not
        with pytest.raises(ResourceExhaustedError) as refused, quotas.hold("heavy"):
            pass
        assert refused.value.retry_after_seconds == COST_RETRY_SECONDS
        now[0] += 4 * CPU_BURST_SECONDS / CPU_SHARE  # the debt is paid off
        with quotas.hold("heavy"):
            pass
