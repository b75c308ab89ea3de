"""The upper bounds of the counts whose huge value did harm (docs/configuration.md): refused at
start naming the setting and its bound, by flag and by file; a value at the bound serves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pml_server import cli
from pml_server.config import ConfigError, serve_config
from pml_server.config._model import UPPER_BOUNDS
from pml_server.ranking.config import COUNT_BOUNDS
from tests.support import spawn_pml_serve, stop_pml_serve

HUGE = [10**12, 2**63, 10**30, 10**400]

# (the flag, the setting, its bound); the rest of UPPER_BOUNDS are the thread pools'
FLAG_BOUNDS = [
    ("--stream-window", "server.stream_window", 4096),
    ("--tenant-burst", "server.tenant_burst", 1_000_000_000),
    ("--recent-values-per-param", "engine.recent_values_per_param", 1024),
]


def test_the_bounds_said_here_are_the_tables() -> None:
    for _, key, most in FLAG_BOUNDS:
        assert UPPER_BOUNDS[key] == most
    assert COUNT_BOUNDS == {"usage_saturation": 1_000_000_000, "overfetch": 1024}


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize(("flag", "key", "most"), FLAG_BOUNDS)
def test_a_huge_count_is_refused_by_flag_naming_it_and_its_bound(
    flag: str, key: str, most: int, huge: int
) -> None:
    """Each was taken: a stream window of 10**12 read every execution a client sent ahead of
    its capture into memory (200 records of 240 KB: 247 MB against 194 MB with 64); a burst
    past 2**1024 was an OverflowError traceback and an abort at start (one of 10**12 let
    every call through a rate); every distinct argument value was kept in its pattern."""
    args = cli.build_parser().parse_args(["serve", flag, str(huge), "--tenant-rate", "5"])
    with pytest.raises(ConfigError) as refused:
        serve_config(args, environ={})
    assert str(refused.value) == f"{flag}: {key} must be at most {most}"


@pytest.mark.parametrize(("flag", "key", "most"), FLAG_BOUNDS)
def test_a_count_at_its_bound_is_taken(flag: str, key: str, most: int) -> None:
    args = cli.build_parser().parse_args(["serve", flag, str(most), "--tenant-rate", "5"])
    config = serve_config(args, environ={})
    section, _, name = key.partition(".")
    assert getattr(getattr(config, section), name) == most


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize(
    ("table", "name"),
    [
        ("server", "stream_window"),
        ("server", "tenant_burst"),
        ("engine", "recent_values_per_param"),
        ("engine.ranking", "overfetch"),
        ("engine.ranking", "usage_saturation"),
    ],
)
def test_a_huge_count_is_refused_in_the_file_naming_it(
    tmp_path: Path, table: str, name: str, huge: int
) -> None:
    path = tmp_path / "pml.toml"
    path.write_text(f"[{table}]\n{name} = {huge}\n")
    args = cli.build_parser().parse_args(["serve", "--config", str(path)])
    with pytest.raises(ConfigError) as refused:
        serve_config(args, environ={})
    key = f"{table}.{name}"
    said = str(refused.value)
    if table == "engine.ranking":
        assert said == f"{path}: {key} must be 1..{COUNT_BOUNDS[name]}, got {huge}"
    else:
        assert said == f"{path}: {key} must be at most {UPPER_BOUNDS[key]}"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--tenant-rate", "5", "--tenant-burst", str(10**400)],
            "--tenant-burst: server.tenant_burst must be at most 1000000000",
        ),
        (["--stream-window", str(10**12)], "--stream-window: server.stream_window must be at most"),
    ],
)
def test_pml_serve_exits_2_with_one_line_for_a_huge_count(
    tmp_path: Path, argv: list[str], said: str
) -> None:
    """`--tenant-burst 1e400` (as digits) was a traceback and SIGABRT (exit -6) at start."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pml"), "serve", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith(f"pml serve: error: {said}")
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "pml-data").exists()


def test_ranking_counts_at_their_bounds_serve_suggestions(tmp_path: Path) -> None:
    """`overfetch = 2**63` (or anything past about 10**17 over k) made every Suggest INTERNAL
    (OverflowError converting the hits asked for), `usage_saturation` past 2**1024 too; at
    their bounds a server suggests."""
    from pml_server.client import PmlClient, make_record

    path = tmp_path / "pml.toml"
    path.write_text(
        '[server]\nlisten = "127.0.0.1:0"\n'
        f'[engine]\ndata_dir = "{tmp_path / "data"}"\nembedder = "hashing"\n'
        f"[engine.ranking]\noverfetch = {COUNT_BOUNDS['overfetch']}\n"
        f"usage_saturation = {COUNT_BOUNDS['usage_saturation']}\n"
    )
    proc, target = spawn_pml_serve("--config", str(path))
    try:
        with PmlClient(target) as client:
            client.record(make_record("read a json file", "read_file('a.json')", tools=["read"]))
            answer = client.suggest("read a json file", k=100)
        assert len(answer.suggestions) == 1
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr[-5000:]
    assert "Traceback" not in stderr
