"""Signed, tenant-bound page tokens wrapping the engine's opaque cursors.

A token is `base64url(payload).base64url(hmac)`; the MAC covers the tenant and the listing kind,
so a token is useless to another tenant or another listing, and any change to it is detected.
The tenant is not written into the token: a token reveals nothing about who made it.
The secret lives in a file (created on first start) so tokens survive a restart.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import LIMITS


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_SECRET_BYTES = 32


def load_or_create_secret(path: Path) -> bytes:
    """The HMAC key of page tokens, 32 random bytes, created (mode 0600, its directory too if
    missing) on first use (docs/configuration.md, page_token_secret_file). Written to a
    temporary file, fsynced, renamed, and the directory fsynced: a power cut must not leave an
    empty key (every token would then be forgeable). An empty file (such a cut before the
    writes were atomic) is replaced; a file of any other size is no key pml wrote (one an
    operator made, `openssl rand -hex 32`): ValueError naming it, never overwritten (it was
    replaced by a random key, so replicas given copies of it each signed with their own).

    Replicas started together share the file: creation holds an exclusive lock on the directory,
    so exactly one process writes the key and every other one reads that same key."""
    secret = _read_secret(path)
    if secret is not None:
        return secret
    path.parent.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        secret = _read_secret(path)
        if secret is not None:
            return secret
        secret = secrets.token_bytes(_SECRET_BYTES)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secret)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        os.fsync(dir_fd)
        return secret
    finally:
        os.close(dir_fd)  # releases the lock


def _read_secret(path: Path) -> bytes | None:
    if path.exists() and not path.is_file() and not path.is_dir():
        # a FIFO with no writer blocked the start for ever, /dev/zero filled the memory
        why = f"not a regular file (a file of {_SECRET_BYTES} bytes, or a path for pml to create)"
        raise OSError(errno.EINVAL, why, str(path))
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        return None
    if not secret:
        return None
    if len(secret) != _SECRET_BYTES:
        raise ValueError(
            f"page-token secret {path}: {len(secret)} bytes, not the {_SECRET_BYTES} random bytes "
            "of a key pml writes: give --page-token-secret-file a file of "
            f"{_SECRET_BYTES} bytes (`head -c {_SECRET_BYTES} /dev/urandom`), or remove this one "
            "for pml to create it"
        )
    return secret


class PageTokens:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, tenant: str, kind: str, payload: bytes) -> bytes:
        message = b"\x00".join((tenant.encode(), kind.encode(), payload))
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def encode(self, tenant: str, kind: str, cursor: str) -> str:
        """Token for the page after `cursor`; "" (the end) stays ""."""
        if not cursor:
            return ""
        payload = json.dumps({"c": cursor}, separators=(",", ":")).encode()
        return f"{_b64(payload)}.{_b64(self._mac(tenant, kind, payload))}"

    def decode(self, tenant: str, kind: str, token: str) -> str:
        """The engine cursor inside `token` ("" for the first page). Raises InvalidArgumentError
        naming `page_token` for a malformed, tampered or foreign token."""
        if not token:
            return ""
        bad = InvalidArgumentError(
            FieldViolation("page_token", "not a page token this server issued for this listing")
        )
        if LIMITS.page_token.excess(token) is not None or token.count(".") != 1:
            raise bad
        payload_text, mac_text = token.split(".")
        try:
            payload, mac = _unb64(payload_text), _unb64(mac_text)
        except ValueError:
            raise bad from None
        if not hmac.compare_digest(mac, self._mac(tenant, kind, payload)):
            raise bad
        try:
            cursor = json.loads(payload)["c"]
        except (ValueError, KeyError, TypeError):
            raise bad from None
        if not isinstance(cursor, str):
            raise bad
        return cursor
