"""`pml_server.config.is_loopback_host` / `is_loopback`: the one loopback rule of `pml serve`
and `pml mcp --transport http`."""

from __future__ import annotations

import pytest

from pml_server.config import is_loopback, is_loopback_host


@pytest.mark.parametrize(
    "host", ["localhost", "127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "[::1]"]
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", "localhost.evil", ""]
)
def test_other_hosts(host: str) -> None:
    assert not is_loopback_host(host)


def test_listen_addresses() -> None:
    assert is_loopback("127.0.0.1:50051")
    assert is_loopback("[::1]:0")
    assert is_loopback("localhost:8765")
    assert not is_loopback("0.0.0.0:50051")
    assert not is_loopback("[::]:50051")
