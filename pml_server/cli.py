"""The `pml` command."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pml_server.config import DEFAULT_DATA_DIR, DEFAULT_LISTEN, ServerConfig


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pml", description="pml: procedural memory for agents")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--listen", default=DEFAULT_LISTEN, help="host:port to bind")
    serve.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="RocksDB dir")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.command == "serve":
        from pml_server.api.server import serve_forever

        serve_forever(ServerConfig(listen=args.listen, data_dir=args.data_dir))


if __name__ == "__main__":
    main()
