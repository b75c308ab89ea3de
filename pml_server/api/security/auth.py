"""API keys: a JSON file of key hashes, each bound to one tenant and one role.

Only SHA-256 hashes of keys are stored (keys are 32 random bytes, so a plain hash is enough: there
is nothing to brute-force). The tenant always comes from the key, never from a request.
Without a keys file the server runs single-tenant: every caller is `default` with the admin role.

File format (`pml keys add` writes it)::

    {"keys": [{"sha256": "<hex>", "tenant": "acme", "role": "write", "label": "ci"}]}
"""

from __future__ import annotations

import enum
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pml_server.domain.errors import PermissionDeniedError, UnauthenticatedError
from pml_server.domain.limits import TENANT_NAME, TENANT_NAME_RULE

SINGLE_TENANT = "default"
# Presented keys remembered (valid ones only), so a call costs a dict lookup instead of a hash;
# dropped all at once past this size, which only costs a re-hash.
_KEY_CACHE_SIZE = 4096
_BEARER = "bearer "


class Role(enum.IntEnum):
    """Ordered: a role may do everything the roles below it may."""

    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown role {text!r}: use read, write or admin") from None


@dataclass(frozen=True)
class Caller:
    tenant: str
    role: Role


_SINGLE_TENANT_CALLER = Caller(tenant=SINGLE_TENANT, role=Role.ADMIN)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyStore:
    """Maps presented keys to callers. `None` path: single-tenant mode. `reload()` swaps in the
    file's current keys (SIGHUP, or `KeysFileWatcher` when the file changes)."""

    def __init__(self, entries: dict[str, Caller] | None, path: Path | None = None) -> None:
        # The hashes and the cache of presented keys are swapped together, as one tuple, so a
        # lookup that straddles a reload never caches a revoked key into the new state.
        self._state: tuple[dict[str, Caller] | None, dict[str, Caller]] = (entries, {})
        self.path = path

    @property
    def multi_tenant(self) -> bool:
        return self._state[0] is not None

    @classmethod
    def load(cls, path: Path | None) -> KeyStore:
        if path is None:
            return cls(None)
        return cls(read_keys_file(path), path)

    def reload(self) -> int:
        """Re-read the keys file; on an error the keys in force stay. Returns how many keys."""
        if self.path is None:
            return 0
        entries = read_keys_file(self.path)
        self._state = (entries, {})
        return len(entries)

    def _lookup(self, key: str) -> Caller | None:
        by_hash, by_key = self._state
        assert by_hash is not None
        caller = by_key.get(key)
        if caller is None:
            caller = by_hash.get(hash_key(key))
            if caller is not None:
                if len(by_key) >= _KEY_CACHE_SIZE:
                    by_key.clear()
                by_key[key] = caller
        return caller

    def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Caller:
        if self._state[0] is None:
            return _SINGLE_TENANT_CALLER
        key = _presented_key(metadata)
        if key is None:
            raise UnauthenticatedError("missing API key: send `authorization: Bearer <key>`")
        caller = self._lookup(key)
        if caller is None:
            raise UnauthenticatedError("unknown API key")
        return caller

    def tenant_of(self, metadata: Sequence[tuple[str, str | bytes]]) -> str | None:
        """The tenant of the call's key, or None when the key is missing or unknown (the call's
        handler then answers UNAUTHENTICATED). Never raises: it runs in gRPC's poll thread."""
        if self._state[0] is None:
            return SINGLE_TENANT
        key = _presented_key(metadata)
        caller = None if key is None else self._lookup(key)
        return None if caller is None else caller.tenant

    def require(self, metadata: Sequence[tuple[str, str | bytes]], role: Role) -> Caller:
        caller = self.authenticate(metadata)
        if caller.role < role:
            raise PermissionDeniedError(
                f"this call needs the {role.name.lower()} role; the key has "
                f"{caller.role.name.lower()}"
            )
        return caller


def _presented_key(metadata: Sequence[tuple[str, str | bytes]]) -> str | None:
    for name, value in metadata:
        if name == "authorization" and isinstance(value, str):
            if value.lower().startswith(_BEARER):
                return value[len(_BEARER) :].strip()
            return None
    return None


def read_keys_file(path: Path, given: str = "") -> dict[str, Caller]:
    """The keys of a keys file by hash; ValueError naming the file and the entry for a bad one,
    and for a missing file (`given`: the flag or key that named it). The server neither starts
    with nor reloads to a missing file: it would refuse every call (docs/operations.md,
    Tenants, keys and TLS)."""
    entries: dict[str, Caller] = {}
    for item in _keys_data(path, missing_ok=False, given=given)["keys"]:
        entries[str(item["sha256"]).lower()] = Caller(
            tenant=str(item["tenant"]), role=Role.parse(str(item["role"]))
        )
    return entries


def _keys_data(path: Path, *, missing_ok: bool, given: str = "") -> dict[str, Any]:
    """A keys file's JSON, checked whole before anything reads or writes it (the server, its
    reloads and `pml keys` alike): an object whose `keys` is a list of objects, each with a
    SHA-256 hex `sha256`, a valid `tenant` and a `role`; ValueError naming the file and the
    entry otherwise. A missing file holds no keys where `missing_ok` (`pml keys add` creates
    it); elsewhere it is a ValueError naming it, `given` (the flag or key that named it) and
    the command that creates it: `pml keys list` or `revoke` of a misspelt path said "no keys"
    and exited 0 (docs/cli.md, Exit codes)."""
    if not path.exists():
        if missing_ok:
            return {"keys": []}
        named = f" ({given})" if given else ""
        raise ValueError(
            f"{path}: no such keys file{named}; "
            f"`pml keys add --keys-file {shlex.quote(str(path))} --tenant NAME` creates one"
        )
    if not path.is_file() and not path.is_dir():  # a directory: read_bytes' IsADirectoryError
        # a FIFO blocked the read for ever (`mkfifo`, or bash's `<(...)`, which is read once
        # while the server reads the file again whenever it changes)
        why = "not a regular file (the server reads a keys file again whenever it changes)"
        raise OSError(errno.EINVAL, why, str(path))
    try:  # a byte order mark (an editor's) read past, as `pml import` does
        data: Any = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    except RecursionError:  # arrays or objects nested thousands deep: json's recursion limit
        raise ValueError(f"{path}: not a keys file: nested too deep to read") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a keys file: an object with a `keys` list")
    keys = data.setdefault("keys", [])
    if not isinstance(keys, list):
        raise ValueError(f"{path}: not a keys file: an object with a `keys` list")
    seen: dict[str, int] = {}
    for i, item in enumerate(keys):
        if not isinstance(item, dict):
            raise ValueError(f"{path}: keys[{i}] is not an object")
        for field in ("sha256", "tenant", "role"):
            if field not in item:
                raise ValueError(f"{path}: keys[{i}] has no {field}")
            if not isinstance(item[field], str):  # `"tenant": 7` was served as tenant "7"
                raise ValueError(f"{path}: keys[{i}].{field} is not a string")
        digest = item["sha256"].lower()
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"{path}: keys[{i}].sha256 is not a SHA-256 hex digest")
        # one key, one tenant and role: a key listed twice was the last entry's, silently
        if digest in seen:
            raise ValueError(
                f"{path}: keys[{i}] is the same key as keys[{seen[digest]}] (same sha256): "
                "a key has one tenant and one role; remove one of them"
            )
        seen[digest] = i
        tenant = str(item["tenant"])
        if not TENANT_NAME.fullmatch(tenant):
            raise ValueError(f"{path}: keys[{i}].tenant {tenant!r} is not a valid tenant")
        try:
            Role.parse(str(item["role"]))
        except ValueError as err:
            raise ValueError(f"{path}: keys[{i}].role: {err}") from None
    return data


@dataclass(frozen=True)
class KeyEntry:
    """One key of a keys file as `pml keys list` shows it: `id` is the start of its hash."""

    id: str
    tenant: str
    role: str
    label: str


KEY_ID_LENGTH = 12


def list_keys(path: Path) -> list[KeyEntry]:
    return [_entry(k) for k in _keys_data(path, missing_ok=False)["keys"]]


def revoke_key(path: Path, key_id: str) -> KeyEntry:
    """Remove the one key whose hash starts with `key_id` (from `pml keys list`, or the hash of
    the key itself); ValueError if none or several match."""
    wanted = key_id.strip().lower()
    # A key given itself is never repeated in an error (docs/operations.md, Secrets outside
    # the store): it would be printed, and kept in whatever keeps the terminal's output.
    shown = f"id {key_id!r}"
    if wanted.startswith("pml_"):
        wanted, shown = hash_key(key_id.strip()), "the key given"
    if len(wanted) < 6:
        raise ValueError(f"key id {key_id!r} is too short: give at least 6 characters")
    with _changing(path, create=False) as data:
        matches = [k for k in data["keys"] if str(k["sha256"]).startswith(wanted)]
        if len(matches) != 1:
            found = "no key" if not matches else f"{len(matches)} keys"
            raise ValueError(f"{found} in {path} with {shown}")
        data["keys"].remove(matches[0])
    return _entry(matches[0])


def _entry(item: dict[str, str]) -> KeyEntry:
    return KeyEntry(
        id=str(item["sha256"])[:KEY_ID_LENGTH],
        tenant=str(item["tenant"]),
        role=str(item["role"]),
        label=str(item.get("label", "")),
    )


@contextmanager
def _changing(path: Path, *, create: bool) -> Iterator[dict[str, Any]]:
    """The keys file's data, to change in place; written back when the block ends. Changes are
    serialized by an exclusive lock on the file's directory (as the page-token secret's): two
    `pml keys add` at once each read the file, and the second replace dropped the first's key
    after it was printed. The write is atomic and durable (temporary file fsynced, renamed,
    directory fsynced): a server watching the file never reads half of it, and a printed key
    survives a power cut."""
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        data = _keys_data(path, missing_ok=create)
        yield data
        tmp = path.with_suffix(path.suffix + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (json.dumps(data, indent=2) + "\n").encode())
            os.fchmod(fd, 0o600)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)  # releases the lock


def add_key(path: Path, tenant: str, role: Role, label: str = "") -> str:
    """Create a new random key for `tenant`, store its hash in `path`, return the key (shown
    once; it cannot be recovered from the file)."""
    if not TENANT_NAME.fullmatch(tenant):
        raise ValueError(f"tenant {tenant!r}: use {TENANT_NAME_RULE}")
    key = "pml_" + secrets.token_urlsafe(32)
    with _changing(path, create=True) as data:
        data["keys"].append(
            {"sha256": hash_key(key), "tenant": tenant, "role": role.name.lower(), "label": label}
        )
    return key
