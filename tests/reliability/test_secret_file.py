"""The page-token secret file without FUSE: a short file (what a power cut before the fsync
left behind) is replaced; an intact one is kept."""

from __future__ import annotations

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


def test_processes_creating_the_key_together_share_one(tmp_path: Path) -> None:
    """Replicas started together on one key file (make cluster) end with the same key, and no
    temporary file is left: before, they shared one temporary name and one rename failed."""
    import threading

    for round_ in range(20):
        path = tmp_path / f"{round_}" / "page-token.key"
        start = threading.Barrier(8)
        keys: list[bytes] = []
        errors: list[BaseException] = []

        def create(
            path: Path = path,
            start: threading.Barrier = start,
            keys: list[bytes] = keys,
            errors: list[BaseException] = errors,
        ) -> None:
            start.wait()
            try:
                keys.append(load_or_create_secret(path))
            except BaseException as err:  # reported by the assertion below
                errors.append(err)

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(set(keys)) == 1
        assert path.read_bytes() == keys[0]
        assert [p.name for p in path.parent.iterdir()] == ["page-token.key"]
