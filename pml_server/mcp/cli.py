"""The `pml mcp` subcommand (registered by `pml_server.cli`)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable

from pml_server.config import is_loopback_host, listen_problem
from pml_server.domain.limits import LIMITS

DEFAULT_HTTP_LISTEN = "127.0.0.1:8765"
# The endpoint path as clients send it: the SDK's router asserted a leading / (a traceback), and
# a space, `?` or `#` made a path no request line carries as such.
_URL_PATH = re.compile(r"/[!-~]*")  # printable ASCII, no space


def add_parser(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    client_flags: Callable[[argparse.ArgumentParser], None],
) -> None:
    from pml_server.cli._main import positive_count  # registered by it: imported by now

    def tool_calls(text: str) -> int:
        """The server's bound, refused past its ceiling as `pml serve` refuses it."""
        value = positive_count(text)
        try:
            LIMITS.with_bounds(tool_calls=value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return value

    p = commands.add_parser(
        "mcp",
        help="serve MCP (stdio or Streamable HTTP) in front of a pml server",
        description="An MCP server whose tools (suggest, record_execution, get_pattern) call "
        "the pml server given by --server. Over HTTP each request's bearer key is sent to pml "
        "as its API key; over stdio, --api-key is.",
    )
    client_flags(p)
    p.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default) or Streamable HTTP",
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_HTTP_LISTEN,
        help=f"host:port for --transport http (default {DEFAULT_HTTP_LISTEN}; port 0: any)",
    )
    p.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    p.add_argument(
        "--max-tool-calls",
        type=tool_calls,
        default=LIMITS.tool_calls.bound,
        help="most tool calls a record_execution takes, refused before they are read: the pml "
        f"server's --max-tool-calls (default {LIMITS.tool_calls.bound}, as the server's)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="an extra accepted Host header (DNS rebinding protection), e.g. pml.example:443",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help="an extra accepted Origin header, e.g. https://app.example",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --listen (put TLS in front of it)",
    )


def run(args: argparse.Namespace) -> int:
    listen: tuple[str, int] | None = None
    if args.transport == "http":
        if not _URL_PATH.fullmatch(args.path) or "?" in args.path or "#" in args.path:
            return _refused(
                f"--path: {args.path!r} is no URL path: it starts with / and holds no "
                "space, ? or # (e.g. /mcp)"
            )
        if (problem := listen_problem(args.listen)) is not None:
            return _refused(f"--listen: {problem}")
        host, _, port_text = args.listen.rpartition(":")
        host = host.strip("[]")
        if not is_loopback_host(host) and not args.allow_remote:
            return _refused(
                f"refusing to listen on {args.listen}: pass --allow-remote to accept "
                "connections from other machines"
            )
        listen = (host, int(port_text))
    # Imported only now: the SDK takes seconds to import. It is an extra of the wheel.
    try:
        from pml_server.mcp._serve import run_http, run_stdio
    except ModuleNotFoundError as err:
        if err.name is None or err.name.partition(".")[0] != "mcp":
            raise
        return _refused("the MCP SDK is not installed: pip install 'pml-server[mcp]'")
    from pml_server.mcp._upstream import Upstream, UpstreamOptions

    upstream = Upstream(
        UpstreamOptions(
            server=args.server,
            api_key=args.api_key,
            tls=args.tls,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            key_hint="" if listen else "give pml mcp --api-key KEY or set PML_API_KEY",
            max_tool_calls=args.max_tool_calls,
        )
    )
    from pml_server.cli._main import client_refusal
    from pml_server.client import PmlClientError

    try:
        # Over HTTP each request's bearer key is checked as it comes (`_http_auth`).
        upstream.check_client(args.api_key if listen is None else None)
    except OSError as err:  # as the other client commands say it
        return _refused(f"{err.filename or ''}: {err.strerror or err}")
    except PmlClientError as err:
        return _refused(client_refusal(args, err.message, err.violations))
    if listen is None:
        run_stdio(upstream)
        return 0
    try:
        run_http(
            upstream,
            *listen,
            path=args.path,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
        )
    except OSError as err:
        return _refused(str(err))
    return 0


def _refused(message: str) -> int:
    """How `pml mcp` stops on an error: one line, `pml mcp: error: ...`, as every pml command
    says one (docs/cli.md, Output); exit 2."""
    print(f"pml mcp: error: {message}", file=sys.stderr)
    return 2
