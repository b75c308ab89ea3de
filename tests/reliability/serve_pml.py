"""`pml serve` for the reliability suite: the CLI's own serve flags and `serve_forever` (signals,
drain, close) over the real engine (Rust normalizer, RocksDB), plus `--snapshot-interval`
so a kill can land mid-snapshot.

    python -m tests.reliability.serve_pml --listen 127.0.0.1:0 --data-dir DIR [serve flags]
"""

from __future__ import annotations

import argparse

from pml_server.api import logs
from pml_server.api.server import serve_forever
from pml_server.cli import _serve_flags, server_config
from pml_server.config import EngineConfig
from pml_server.service import Engine


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="serve_pml")
    _serve_flags(parser)
    parser.add_argument("--snapshot-interval", type=float, default=300.0)
    args = parser.parse_args(argv)
    logs.configure(args.log_level, json_format=args.log_format == "json")
    config = server_config(args)
    engine = Engine.open(
        EngineConfig(
            data_dir=config.data_dir,
            embedder=config.embedder,
            durability=config.durability,
            max_code_bytes=config.max_code_bytes,
            max_tool_calls=config.max_tool_calls,
            vector_index=config.vector_index,
            snapshot_interval_seconds=args.snapshot_interval,
        )
    )
    serve_forever(config, engine=engine)


if __name__ == "__main__":
    main()
