"""Listen addresses: which are loopback, the one rule `pml serve` (a non-loopback address needs a
keys file) and `pml mcp --transport http` (a non-loopback address needs --allow-remote) apply;
and why one cannot be bound, in one line naming the address and the cause (the gRPC, OTLP/HTTP,
metrics and MCP HTTP ports alike; docs/cli.md, exit code 2)."""

from __future__ import annotations

import errno
import ipaddress
import socket

_BIND_CAUSES = {
    errno.EADDRINUSE: "the port is already in use (another process listens on it)",
    errno.EACCES: "permission denied (a port below 1024 needs privileges)",
    errno.EADDRNOTAVAIL: "the address is not one of this host's",
}


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


def listen_problem(listen: str) -> str | None:
    """Why `listen` is no `host:port` (None: it is one). gRPC took `127.0.0.1` without a port
    as port 443, and bound a port past 65535 modulo 65536 (`:99999` on 34463, `:-5` on 65531)."""
    host, sep, port = listen.rpartition(":")
    if not sep or (":" in host and not (host[0] == "[" and host[-1] == "]")):
        return f"{listen!r} is no host:port (an IPv6 host in brackets: [::1]:50051)"
    if not (port.lstrip("-").isascii() and port.lstrip("-").isdigit()):
        return f"port {port!r} is not a number 0..65535"
    if not 0 <= int(port) <= 65535:
        return f"port {port} is not 0..65535"
    return None


def bind_error(address: str, cause: BaseException | None, what: str = "") -> OSError:
    """The error of a listen address that could not be bound: `could not bind {what}{address}`
    and the cause, in words (an errno's, or the error's own)."""
    if isinstance(cause, OSError) and cause.errno in _BIND_CAUSES:
        why = _BIND_CAUSES[cause.errno]
    elif isinstance(cause, OSError) and cause.strerror:
        why = cause.strerror
    else:
        why = str(cause) if cause is not None else "it was refused"
    return OSError(f"could not bind {what}{address}: {why}")


def bind_problem(listen: str) -> OSError | None:
    """Why `host:port` cannot be bound now, tried with sockets closed at once (gRPC says only
    that it failed, and logs its own line first): as gRPC, each address the host resolves to,
    and it can when one can. None when it can, or when the address is no `host:port` a socket
    can try (the real binder then says why)."""
    host, _, port = listen.rpartition(":")
    try:
        found = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, ValueError):
        return None
    first: OSError | None = None
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC and uvicorn
            try:
                sock.bind(address)
            except OSError as err:
                first = first or err
                continue
        return None
    return first
