"""`pml serve` on a data directory it cannot use: one line naming the directory and what is
wrong with it, exit 2, no traceback (docs/storage.md, The embedded store (RocksDB))."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pml_server import cli
from pml_server.client import PmlClient, make_record
from tests.support import small_tmpfs, spawn_pml_serve, stop_pml_serve


def _serve(data: Path, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(
            ["serve", "--data-dir", str(data), "--embedder", "hashing", "--listen", "127.0.0.1:0"]
        )
    err = capsys.readouterr().err
    assert done.value.code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("below", [False, True])
def test_a_data_dir_through_a_symbolic_link_loop_is_named_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], below: bool
) -> None:
    """Before: `... cannot be the data directory: it, or a folder above it, is a file` for the
    loop itself (nothing there is a file), and `[Errno 40] Too many levels of symbolic links`
    for a folder below it."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    data = tmp_path / "a" / "data" if below else tmp_path / "a"
    it = f"the folder above it {tmp_path / 'a'}" if below else "it"
    assert _serve(data, capsys) == (
        f"pml serve: error: {data} cannot be the data directory: {it} is a symbolic link in a "
        f"loop ({tmp_path / 'a'} -> b)"
    )


def test_a_data_dir_that_is_a_link_to_nothing_is_named_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `it, or a folder above it, is a file` (the link's target was removed)."""
    data = tmp_path / "data"
    data.symlink_to(tmp_path / "gone")
    assert _serve(data, capsys) == (
        f"pml serve: error: {data} cannot be the data directory: it is a symbolic link to "
        f"{tmp_path / 'gone'}, which does not exist"
    )


@pytest.fixture
def small_mount(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "mnt") as where:
        yield where


def test_a_data_dir_on_a_full_disk_is_not_called_damaged(
    small_mount: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `... No space left on device (os error 28). Restore it from a backup, or use
    another data directory`: an operator told to restore a store that only needs room."""
    data = small_mount / "data"
    data.mkdir()
    with (small_mount / "filler").open("wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass
    line = _serve(data, capsys)
    assert line.startswith(f"pml serve: error: cannot open the store at {data}: "), line
    assert "No space left on device" in line
    assert line.endswith("Its file system refused it: free space on its disk, then start again")


def test_a_data_dir_on_a_read_only_file_system_is_not_called_damaged(
    small_mount: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `... Read-only file system (os error 30). Restore it from a backup, ...`."""
    subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], check=True)
    line = _serve(small_mount, capsys)
    assert line.startswith(f"pml serve: error: cannot open the store at {small_mount}: "), line
    assert "Read-only file system" in line
    assert line.endswith(
        "Its file system refused it: mount its file system read-write, then start again"
    )
    below = small_mount / "data"
    assert _serve(below, capsys) == (
        f"pml serve: error: {below} cannot be the data directory: Read-only file system"
    )


def test_a_link_to_a_running_servers_data_dir_is_refused_as_in_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The LOCK file is one file whichever path leads to it: a second server given a link to
    a running server's data directory (another process) is refused, and the first one keeps
    serving what it acknowledged (no defect found; the in-use test held the lock in process,
    by the same path)."""
    live = tmp_path / "live"
    proc, target = spawn_pml_serve("--data-dir", str(live), "--embedder", "hashing")
    try:
        with PmlClient(target, timeout=30) as client:
            client.record(make_record("Read a JSON file", "await mcp.fs_read({p: 'a'});"))
        link = tmp_path / "link"
        link.symlink_to(live)
        line = _serve(link, capsys)
        assert line == (
            f"pml serve: error: {link} is in use by another pml process (RocksDB holds its "
            "LOCK file)"
        )
        with PmlClient(target, timeout=30) as client:
            assert client.suggest("Read a JSON file").suggestions
    finally:
        err = stop_pml_serve(proc)
    assert proc.returncode == 0, err
