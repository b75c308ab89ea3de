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
