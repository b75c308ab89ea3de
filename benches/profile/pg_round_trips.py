"""Statements and round trips per capture on the PostgreSQL store, counted in the driver: an
in-process engine over a throwaway PostgreSQL 15 (hashing embedder). Run it from the repository
root: `.venv/bin/python -m benches.profile.pg_round_trips`. Not a suite (`python -m benches` skips
it): a profile of the shared store's capture path."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from pml_server.domain.model import ExecutionRecord
from testing.engine import Clock, make_record, open_engine
from testing.postgres_cluster import PostgresCluster

CAPTURES = 20
counts = {"statements": 0, "round_trips": 0}
_execute = psycopg.Connection.execute
_pipeline_exit = psycopg.Pipeline.__exit__


def _counted_execute(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
    counts["statements"] += 1
    if not self._pipeline:  # outside a pipeline every statement waits for its answer
        counts["round_trips"] += 1
    return _execute(self, *args, **kwargs)


def _counted_pipeline_exit(self: psycopg.Pipeline, *args: Any) -> None:
    counts["round_trips"] += 1  # a pipeline is one round trip (its sync)
    _pipeline_exit(self, *args)


def main() -> None:
    psycopg.Connection.execute = _counted_execute  # type: ignore[method-assign]
    psycopg.Pipeline.__exit__ = _counted_pipeline_exit  # type: ignore[method-assign]
    root = Path(tempfile.mkdtemp(prefix="pml-round-trips-"))
    os.chmod(root, 0o755)
    cluster = PostgresCluster(root / "pg")
    cluster.root.mkdir()
    os.chmod(cluster.root, 0o755)
    cluster.init()
    cluster.start()
    try:
        engine = open_engine(root / "engine", Clock(), store=cluster.create_database())
        tools = ["fs.read", "json.parse"]
        engine.record("t", make_record("warm", "Read JSON file", tools))
        kinds: dict[str, Callable[[int], ExecutionRecord]] = {
            "counted (known pattern, known intent)": lambda i: make_record(
                f"c{i}", "Read JSON file", tools
            ),
            "new pattern": lambda i: make_record(
                f"n{i}", f"Parse file {i}", [f"tool{i}"],
                code=f"const x = await mcp.tool{i}({{}}); return x",
            ),
        }  # fmt: skip
        for name, make in kinds.items():
            counts.update(statements=0, round_trips=0)
            for i in range(CAPTURES):
                engine.record("t", make(i))
            print(
                f"{name}: {counts['statements'] / CAPTURES:.1f} statements,"
                f" {counts['round_trips'] / CAPTURES:.1f} round trips per capture"
                " (the follower's polls meanwhile included)"
            )
        engine.close()
    finally:
        cluster.stop("fast")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
