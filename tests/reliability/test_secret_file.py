"""The page-token secret file without FUSE: an empty file (what a power cut before the fsync
left behind) is replaced; an intact one is kept; one of another size is refused, untouched."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from pml_server.api.security.page_tokens import load_or_create_secret
from tests.conftest import StartServer


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


def test_a_secret_file_pml_did_not_write_is_refused_and_left_as_it_is(
    start: StartServer, tmp_path: Path
) -> None:
    """A key an operator made for every replica (`openssl rand -hex 32`: 65 bytes) was replaced
    by 32 random bytes, so each replica given a copy signed with its own key and refused the
    others' page tokens. Now the server does not start, naming the file, which stays as it was
    (docs/configuration.md)."""
    path = tmp_path / "shared.key"
    path.write_text("0f" * 32 + "\n")
    with pytest.raises(ValueError, match=r"^page-token secret ") as refused:
        start(page_token_secret_file=path)
    assert f"{path}: 65 bytes, not the 32 random bytes" in str(refused.value)
    assert "--page-token-secret-file" in str(refused.value)
    assert path.read_text() == "0f" * 32 + "\n"


def test_a_missing_secret_file_is_created_private(start: StartServer, tmp_path: Path) -> None:
    """A --page-token-secret-file that does not exist yet is created on purpose (replicas
    started together share it: `make cluster`), mode 0600 whatever the umask, and kept."""
    path = tmp_path / "shared" / "page-token.key"
    old = os.umask(0)
    try:
        start(page_token_secret_file=path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_bytes()
    assert len(first) == 32
    start(page_token_secret_file=path, data_dir=tmp_path / "replica-b")  # another replica
    assert path.read_bytes() == first
