"""The page-token secret file without FUSE: a short file (what a power cut before the fsync
left behind) is replaced; an intact one is kept."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

from pml_server.api.security.page_tokens import load_or_create_secret


def test_an_empty_secret_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "page-token.key"
    path.write_bytes(b"")
    secret = load_or_create_secret(path)
    assert len(secret) == 32
    assert path.read_bytes() == secret


def test_an_intact_secret_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "page-token.key"
    first = load_or_create_secret(path)
    assert load_or_create_secret(path) == first
    assert not (tmp_path / "page-token.key.tmp").exists()


def _create_together(path: Path, barrier: threading.Barrier, keys: list[bytes]) -> None:
    barrier.wait()
    keys.append(load_or_create_secret(path))


def test_callers_creating_the_secret_together_share_one_key(tmp_path: Path) -> None:
    """Replicas started together (`make cluster`) create the key at the same moment: each must
    end up with the one key on disk, and no temporary file may be left behind."""
    for round_ in range(20):
        directory = tmp_path / f"round-{round_}"
        path = directory / "page-token.key"
        barrier = threading.Barrier(8)
        keys: list[bytes] = []
        threads = [
            threading.Thread(target=_create_together, args=(path, barrier, keys)) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(keys) == 8
        assert set(keys) == {path.read_bytes()}
        assert sorted(p.name for p in directory.iterdir()) == ["page-token.key"]


def _create_in_a_process(path: str, start: float, out: multiprocessing.Queue[bytes]) -> None:
    while time.time() < start:
        time.sleep(0.001)
    out.put(load_or_create_secret(Path(path)))


def test_processes_creating_the_secret_together_share_one_key(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    for round_ in range(3):
        path = tmp_path / f"round-{round_}" / "page-token.key"
        out: multiprocessing.Queue[bytes] = context.Queue()
        start = time.time() + 2.0
        workers = [
            context.Process(target=_create_in_a_process, args=(str(path), start, out))
            for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        keys = [out.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
            assert worker.exitcode == 0
        assert set(keys) == {path.read_bytes()}
