"""`pml serve` for the reliability suite: the CLI's own serve flags and `serve_forever` (signals,
drain, close) over the real engine (Rust normalizer, RocksDB), plus `--snapshot-interval`
so a kill can land mid-snapshot.

    python -m tests.reliability.serve_pml --listen 127.0.0.1:0 --data-dir DIR [serve flags]
"""

from __future__ import annotations

import argparse

from pml_server.api import logs
from pml_server.api.server import serve_forever
from pml_server.cli import _serve_flags
from pml_server.config import EngineConfig, ServerConfig
from pml_server.engine import Engine


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="serve_pml")
    _serve_flags(parser)
    parser.add_argument("--snapshot-interval", type=float, default=300.0)
    args = parser.parse_args(argv)
    logs.configure(args.log_level, json_format=args.log_format == "json")
    config = ServerConfig(
        listen=args.listen,
        data_dir=args.data_dir,
        embedder=args.embedder,
        durability=args.durability,
        vector_index=args.vector_index,
        keys_file=args.keys_file,
        max_code_bytes=args.max_code_bytes,
        max_tool_calls=args.max_tool_calls,
        max_message_bytes=args.max_message_bytes,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        max_workers=args.max_workers,
        capture_workers=args.capture_workers,
        stream_window=args.stream_window,
        grace_seconds=args.grace_seconds,
        tenant_max_in_flight=args.tenant_max_in_flight,
        tenant_rate=args.tenant_rate,
        tenant_burst=args.tenant_burst,
    )
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
