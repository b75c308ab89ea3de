"""Which listen addresses are loopback: the one rule `pml serve` (a non-loopback address needs a
keys file) and `pml mcp --transport http` (a non-loopback address needs --allow-remote) apply."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """`localhost`, or an IPv4 or IPv6 loopback address (127.0.0.0/8, ::1; IPv6 brackets
    allowed). Any other name is not: it may resolve to anything."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback(listen: str) -> bool:
    """Whether a `host:port` listen address is loopback."""
    return is_loopback_host(listen.rsplit(":", 1)[0])
