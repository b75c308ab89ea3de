"""The `pml` command: `serve` runs the server; every other command talks to one through
`pml_server.client` (`--server`, `--api-key` or the PML_SERVER / PML_API_KEY variables)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pml_server.config import DEFAULT_DATA_DIR, DEFAULT_LISTEN, ServerConfig

Handler = Callable[[argparse.Namespace], int]


def _serve_flags(serve: argparse.ArgumentParser) -> None:
    d = ServerConfig()
    add = serve.add_argument
    add("--listen", default=DEFAULT_LISTEN, help="host:port to bind (port 0: any free port)")
    add("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="RocksDB directory")
    add(
        "--embedder",
        default=d.embedder,
        choices=["minilm", "hashing"],
        help="intent embedder: the real MiniLM model, or the fast hashing one",
    )
    add(
        "--durability",
        default=d.durability,
        choices=["sync", "fast"],
        help="sync: fsync before acknowledging; fast: WAL without fsync",
    )
    add(
        "--vector-index",
        default=d.vector_index,
        choices=["hnsw", "exact"],
        help="intent search: the Rust HNSW index, or exact numpy search",
    )
    add("--keys-file", type=Path, help="API keys file (see `pml keys add`); none: single tenant")
    add(
        "--allow-insecure-remote",
        action="store_true",
        help="allow a non-loopback --listen without a keys file",
    )
    add("--tls-cert", type=Path, help="server certificate (PEM)")
    add("--tls-key", type=Path, help="server private key (PEM)")
    add("--tls-client-ca", type=Path, help="CA for client certificates: enables mutual TLS")
    add("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    add("--metrics-host", default=d.metrics_host, help="address for /metrics")
    add("--max-code-bytes", type=int, default=d.max_code_bytes)
    add("--max-tool-calls", type=int, default=d.max_tool_calls)
    add("--max-message-bytes", type=int, default=d.max_message_bytes)
    add("--max-concurrent-rpcs", type=int, default=d.max_concurrent_rpcs)
    add("--max-workers", type=int, default=d.max_workers, help="RPC threads")
    add("--capture-workers", type=int, default=d.capture_workers)
    add(
        "--stream-window",
        type=int,
        default=d.stream_window,
        help="unacknowledged executions per stream before the server stops reading",
    )
    add(
        "--tenant-max-in-flight",
        type=int,
        help="calls in progress per tenant (default: a quarter of --max-workers with a keys file)",
    )
    add("--max-streams", type=int, help="streams open at once (default: half of --max-workers)")
    add("--max-streams-per-connection", type=int, default=4, help="streams open per connection")
    add(
        "--stream-idle-seconds",
        type=float,
        default=60.0,
        help="a stream silent this long with nothing in flight is closed",
    )
    add("--tenant-rate", type=float, help="calls per second per tenant (token bucket)")
    add("--tenant-burst", type=int, help="token bucket size (default: the rate)")
    add(
        "--grace-seconds",
        type=float,
        default=d.grace_seconds,
        help="how long SIGTERM waits for in-flight calls",
    )
    add("--log-format", choices=["json", "text"], default="json")
    add("--log-level", default="info")


def _client_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=os.environ.get("PML_SERVER", DEFAULT_LISTEN))
    p.add_argument("--api-key", default=os.environ.get("PML_API_KEY"))
    p.add_argument("--tls", action="store_true", help="use TLS with the system roots")
    p.add_argument("--tls-ca", type=Path, help="CA that signed the server certificate")
    p.add_argument("--tls-cert", type=Path, help="client certificate (mutual TLS)")
    p.add_argument("--tls-key", type=Path, help="client key (mutual TLS)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pml", description="pml: procedural memory for agents")
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_flags(commands.add_parser("serve", help="run the gRPC server"))

    keys = commands.add_parser("keys", help="manage the API keys file")
    keys.add_argument("action", choices=["add"])
    keys.add_argument("--keys-file", type=Path, required=True)
    keys.add_argument("--tenant", required=True)
    keys.add_argument("--role", choices=["read", "write", "admin"], default="write")
    keys.add_argument("--label", default="")

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        _client_flags(sub)
        return sub

    rec = client("record", "record one execution (from flags or a JSON file)")
    rec.add_argument("--file", type=Path, help="ExecutionRecord as proto JSON")
    rec.add_argument("--intent")
    rec.add_argument("--code", help="the code; or --code-file")
    rec.add_argument("--code-file", type=Path)
    rec.add_argument("--language", default="typescript")
    rec.add_argument("--tool", action="append", default=[], help="a succeeded tool call, in order")
    rec.add_argument(
        "--failed-tool",
        action="append",
        default=[],
        metavar="TOOL:ERROR",
        help="a failed tool call",
    )
    rec.add_argument("--request-id", default="")
    rec.add_argument("--duration-ms", type=float, default=0.0)

    imp = client("import", "upload a JSONL file of ExecutionRecords over the stream")
    imp.add_argument("file", type=Path)

    sug = client("suggest", "ranked suggestions with score parts")
    sug.add_argument("intent")
    sug.add_argument("-k", type=int, default=0, help="how many (default 5)")
    sug.add_argument("--min-match", type=float)
    sug.add_argument("--min-success", type=float)
    sug.add_argument("--tools", help="comma-separated tools available now")
    sug.add_argument("--tag", action="append", default=[])
    sug.add_argument("--include-flagged", action="store_true")
    sug.add_argument("--explain", action="store_true", help="also show filtered-out candidates")

    lst = client("list", "list patterns (or capabilities)")
    lst.add_argument("--capabilities", action="store_true")
    lst.add_argument("--limit", type=int, default=100)

    show = client("show", "show a pattern or capability")
    show.add_argument("name", help="patterns/ID, capabilities/ID, or a bare pattern id")
    delete = client("delete", "delete a pattern or capability")
    delete.add_argument("name", help="patterns/ID or capabilities/ID")
    fails = client("failures", "the failure log, newest first")
    fails.add_argument("--limit", type=int, default=50)
    ret = client("retention", "run the retention policy (dry run unless --apply)")
    ret.add_argument("--apply", action="store_true")
    client("stats", "counts of this tenant's data")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        sys.exit(_serve(args))
    if args.command == "keys":
        from pml_server.api.auth import Role, add_key

        key = add_key(args.keys_file, args.tenant, Role.parse(args.role), args.label)
        print(f"API key for tenant {args.tenant} ({args.role}); shown once, store it now:")
        print(key)
        return
    from pml_server.cli_commands import COMMANDS
    from pml_server.client import PmlClientError

    try:
        sys.exit(COMMANDS[args.command](args))
    except PmlClientError as err:
        from rich.console import Console

        console = Console(stderr=True)
        console.print(f"[red]error[/] {err.code.name}: {err.message}", markup=True)
        for field, description in err.violations:
            console.print(f"  [bold]{field}[/]: {description}")
        sys.exit(1)


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The ServerConfig that `pml serve` flags describe (every serve flag lands in it)."""
    return ServerConfig(
        listen=args.listen,
        data_dir=args.data_dir,
        embedder=args.embedder,
        durability=args.durability,
        vector_index=args.vector_index,
        keys_file=args.keys_file,
        allow_insecure_remote=args.allow_insecure_remote,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        max_code_bytes=args.max_code_bytes,
        max_tool_calls=args.max_tool_calls,
        max_message_bytes=args.max_message_bytes,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        max_workers=args.max_workers,
        capture_workers=args.capture_workers,
        stream_window=args.stream_window,
        grace_seconds=args.grace_seconds,
        tenant_max_in_flight=args.tenant_max_in_flight,
        max_streams=args.max_streams,
        max_streams_per_connection=args.max_streams_per_connection,
        stream_idle_seconds=args.stream_idle_seconds,
        tenant_rate=args.tenant_rate,
        tenant_burst=args.tenant_burst,
    )


def _serve(args: argparse.Namespace) -> int:
    from pml_server.api import logs
    from pml_server.api.server import serve_forever

    logs.configure(args.log_level, json_format=args.log_format == "json")
    config = server_config(args)
    try:
        serve_forever(config)
    except (ValueError, OSError) as err:
        print(f"pml serve: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    main()
