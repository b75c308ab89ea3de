"""`pml serve` as a real process for the operations tests: the same `serve_forever` (signals,
drain, close) over the test engine.

Usage: python -m tests.api.serve_for_test DATA_DIR [--metrics]"""

from __future__ import annotations

import sys
from pathlib import Path

from pml_server.api import logs
from pml_server.api.server import serve_forever
from pml_server.config import config_of
from tests.support import open_engine


def main() -> None:
    logs.configure("info", json_format=True)
    config = config_of(
        listen="127.0.0.1:0",
        data_dir=Path(sys.argv[1]),
        embedder="hashing",
        durability="sync",
        metrics_port=0 if "--metrics" in sys.argv else None,
        grace_seconds=10.0,
    )
    serve_forever(config, engine=open_engine(config))


if __name__ == "__main__":
    main()
