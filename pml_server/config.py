"""Server configuration: one typed object, filled from CLI flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_DATA_DIR = Path("pml-data")


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to start."""

    listen: str = DEFAULT_LISTEN
    data_dir: Path = DEFAULT_DATA_DIR
    max_workers: int = 16
    grace_seconds: float = 10.0
