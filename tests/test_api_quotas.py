"""Per-tenant quotas and the server-wide concurrency limit answer RESOURCE_EXHAUSTED, and a
tenant over its quota does not block its neighbour."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2
from pml_server.api.quotas import TenantQuotas
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.domain.errors import ResourceExhaustedError
from tests.conftest import StartServer


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
    release = threading.Event()
    with (
        PmlClient(target, api_key=found["acme-write"]) as acme,
        PmlClient(target, api_key=found["globex-admin"]) as globex,
    ):
        threads = [_open_stream(acme, release, f"s{i}") for i in range(2)]
        try:
            err = _exhausted(acme.stats)
            assert "tenant" in err.message
            assert globex.stats().patterns == 0  # the neighbour is served
        finally:
            release.set()
            for t in threads:
                t.join(10)
        assert acme.stats().patterns == 2  # slots are given back


def test_server_wide_concurrency_limit(start: StartServer) -> None:
    server = start(max_concurrent_rpcs=2)
    release = threading.Event()
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        threads = [_open_stream(client, release, f"s{i}") for i in range(2)]
        try:
            _exhausted(client.stats)
        finally:
            release.set()
            for t in threads:
                t.join(10)
