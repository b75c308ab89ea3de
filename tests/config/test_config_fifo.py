"""`pml serve --config` naming what is no regular file: a FIFO (`mkfifo`, bash's `<(...)`), whose
writer may come later or never, and a file the server's user cannot read (docs/configuration.md).
Each runs `pml serve` as a process."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pml_server.client import PmlClient
from pml_server.config import read_file
from pml_server.config._toml import FIFO_WRITER_SECONDS
from pml_server.embedding import HashingEmbedder
from tests.support import spawn_pml_serve, stop_pml_serve

PML = Path(sys.executable).parent / "pml"


def _settings(data: Path) -> str:
    return (
        f'[server]\nlisten = "127.0.0.1:0"\nlog_level = "warning"\n'
        f'[engine]\ndata_dir = "{data}"\nembedder = "hashing"\ndurability = "fast"\n'
    )


def _serves_the_files_settings(proc: subprocess.Popen[str], target: str, data: Path) -> None:
    """The server started from the file's settings (port 0, the hashing embedder, its data
    directory) and stops cleanly."""
    try:
        with PmlClient(target) as client:
            assert client.server_info().embedding_dimension == HashingEmbedder().dim
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr[-5000:]
    assert data.is_dir()


def test_a_fifo_no_one_writes_to_is_refused_naming_it(tmp_path: Path) -> None:
    """`mkfifo f; pml serve --config f` blocked for ever in open(), before a word was said: now
    it waits `FIFO_WRITER_SECONDS` for a writer, then exit 2 with one line naming the file."""
    fifo = tmp_path / "pml.toml"
    os.mkfifo(fifo)
    done = subprocess.run(
        [str(PML), "serve", "--config", str(fifo), "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=FIFO_WRITER_SECONDS + 110,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"pml serve: error: {fifo}: no writer on this FIFO after {FIFO_WRITER_SECONDS:g} s "
        "(write the config into it, or give a regular file)\n",
    )
    assert not (tmp_path / "data").exists()


@contextlib.contextmanager
def _late_writer(fifo: Path, text: str) -> Iterator[None]:
    """A writer that opens `fifo` only once a reader holds it open (before: ENXIO), holds it
    a moment without writing, then writes `text` and closes it; joined on exit."""

    def write() -> None:
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as err:
                if err.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                time.sleep(0.05)
        try:
            time.sleep(0.5)  # the reader finds a writer with nothing written yet
            os.set_blocking(fd, True)
            if text:
                os.write(fd, text.encode())
        finally:
            os.close(fd)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        writer.join(timeout=60)


def test_a_fifo_whose_writer_closes_it_without_writing_is_an_empty_file(tmp_path: Path) -> None:
    """A writer came and went without a byte (`: > fifo`): the end of an empty file, at once
    (the defaults), not a wait for another writer."""
    fifo = tmp_path / "pml.toml"
    os.mkfifo(fifo)
    with _late_writer(fifo, ""):
        assert read_file(fifo) == {}


def test_a_fifo_whose_writer_comes_after_the_server_opened_it_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pml.toml"
    os.mkfifo(fifo)
    with _late_writer(fifo, _settings(tmp_path / "data")):
        proc, target = spawn_pml_serve("--config", str(fifo))
    _serves_the_files_settings(proc, target, tmp_path / "data")


def test_bash_process_substitution_is_read(tmp_path: Path) -> None:
    """`pml serve --config <(cat pml.toml)`: bash passes /dev/fd/63, a pipe, whose writer may
    not have written yet (here it sleeps first)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    path = tmp_path / "pml.toml"
    path.write_text(_settings(tmp_path / "data"))
    script = 'exec "$0" serve --config <(sleep 0.5; cat "$1")'
    proc = subprocess.Popen(
        [bash, "-c", script, str(PML), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "(port " not in line:
        proc.kill()
        raise AssertionError(f"pml serve did not start: {line!r} {proc.communicate()[1]}")
    target = f"127.0.0.1:{line.split('(port ')[1].split(')')[0]}"
    _serves_the_files_settings(proc, target, tmp_path / "data")


def _as_nobody() -> list[str] | None:
    """The command prefix that runs `pml` as the unprivileged user nobody (65534), if this
    test runs as root and one of the tools can: `setpriv`, else `runuser`; None also when
    nobody cannot reach this checkout (a clone in a folder only root may enter)."""
    if os.geteuid() != 0:
        return None
    probe = [sys.executable, "-c", "import os, pml_server.cli; print(os.geteuid())"]
    for prefix in (
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        ["runuser", "-u", "nobody", "--"],
    ):
        if shutil.which(prefix[0]) is None:
            continue
        ran = subprocess.run([*prefix, *probe], capture_output=True, text=True, timeout=60)
        if ran.returncode == 0 and ran.stdout.strip() == "65534":
            return prefix
    return None


def test_a_config_file_the_server_cannot_read_is_named_exit_2() -> None:
    """A file that exists but the server's user may not read: one line naming it, exit 2,
    no traceback (the server runs as nobody; the file is root's, mode 0600)."""
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("needs root, setpriv or runuser, and a checkout nobody may read")
    root = Path(tempfile.mkdtemp(prefix="pml-unreadable-"))
    try:
        os.chmod(root, 0o777)  # nobody may enter it and create its data directory
        path = root / "pml.toml"
        path.write_text(_settings(root / "data"))
        os.chmod(path, 0o600)
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "pml_server.cli", "serve", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
        )
        assert (done.returncode, done.stderr) == (
            2,
            f"pml serve: error: {path}: cannot read it: Permission denied\n",
        )
        assert not (root / "data").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)
