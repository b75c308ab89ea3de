"""Signed, tenant-bound page tokens wrapping the engine's opaque cursors.

A token is `base64url(payload).base64url(hmac)`; the MAC covers the tenant and the listing kind,
so a token is useless to another tenant or another listing, and any change to it is detected.
The tenant is not written into the token: a token reveals nothing about who made it.
The secret lives in a file (created on first start) so tokens survive a restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import LIMITS


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_SECRET_BYTES = 32


def load_or_create_secret(path: Path) -> bytes:
    """The HMAC key of page tokens, created on first use. Written to a temporary file of its
    own, fsynced, published and the directory fsynced: a power cut must not leave an empty key
    (every token would then be forgeable). Processes starting together on one file (replicas)
    end with the same key: the first to publish wins (a hard link fails when the key exists) and
    the others read it. A short file (such a cut before this fix) is replaced."""
    if path.exists():
        secret = path.read_bytes()
        if len(secret) == _SECRET_BYTES:
            return secret
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_bytes(_SECRET_BYTES)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        try:
            os.write(fd, secret)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            theirs = path.read_bytes()
            if len(theirs) == _SECRET_BYTES:
                return theirs  # another process published first: share its key
            os.replace(tmp, path)  # a short key left by a cut: replaced
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
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
