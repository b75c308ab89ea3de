"""`pml serve` for the reliability suite: the CLI's own serve flags and `serve_forever` (signals,
drain, close) over the real engine (Rust normalizer, RocksDB); `--snapshot-interval-seconds`
lets a kill land mid-snapshot; with `PML_TEST_CLOCK_OFFSET_FILE` its wall clock is one the test
steps (`testing/stepped_clock.py`).

    python -m testing.serve_pml --listen 127.0.0.1:0 --data-dir DIR [serve flags]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pml_server.api import logs
from pml_server.api.server import serve_forever
from pml_server.config import add_serve_flags, serve_config
from testing import stepped_clock


def main(argv: list[str] | None = None) -> None:
    if offsets := os.environ.get(stepped_clock.ENV):
        stepped_clock.install(Path(offsets))  # a clock the test steps
    parser = argparse.ArgumentParser(prog="serve_pml")
    add_serve_flags(parser)
    config = serve_config(parser.parse_args(argv))
    logs.configure(config.server.log_level, json_format=config.server.log_format == "json")
    serve_forever(config)


if __name__ == "__main__":
    main()
