"""`pml serve` as a real process for the operations tests: the same `serve_forever` (signals,
drain, close) over the test engine.

Usage: python -m tests.api.serve_for_test DATA_DIR [--metrics] [--sigterm-from-a-thread]

With --sigterm-from-a-thread, a line on stdin makes a thread other than the main one send
SIGTERM to itself: the kernel may hand a process's signal to any of its threads, and this makes
that case happen on demand."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from pml_server.api import logs
from pml_server.api.server import serve_forever
from pml_server.config import config_of
from tests.support import open_engine


def _sigterm_from_a_thread_on_stdin() -> None:
    sys.stdin.readline()
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


def main() -> None:
    if "--sigterm-from-a-thread" in sys.argv:
        threading.Thread(target=_sigterm_from_a_thread_on_stdin, daemon=True).start()
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
