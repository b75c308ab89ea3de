"""The backup root: naming, the all-or-nothing rename, pruning, and leftovers of a crash."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BACKUP_PREFIX = "pml-backup-"
MANIFEST_NAME = "pml-backup.json"
# A backup is made under this name and renamed once whole: a crash leaves only a partial
# directory, which is never listed, restored from or kept (the next backup removes it).
_PARTIAL_PREFIX = ".partial-"
# Sorts as it reads: the names' order is the backups' order.
_STAMP = "%Y-%m-%dT%H-%M-%S.%fZ"
# In the data directory, beside (not in) the store: a checkpoint does not copy it, so a server
# started on a restored copy is a store of its own (docs/storage.md, "Backups and restore").
STORE_ID_NAME = "pml-store-id"
# What a restored copy's manifest is renamed to once its files were checked, before the first
# open writes into the store (docs/storage.md, "Backups and restore").
RESTORED_NAME = "pml-restored-from.json"
_HASH_CHUNK = 1 << 20
# The files of a RocksDB store, beside which a restored copy must be alone.
_STORE_FILES = ("*.sst", "*.log", "*.blob", "MANIFEST-*", "IDENTITY")


class RestoreRefusedError(OSError):
    """A restored copy of a backup whose files are not those the backup wrote (one is missing,
    shorter or longer, or its bytes changed), made over another store, or copied into the data
    directory rather than as it."""


@dataclass(frozen=True)
class Backup:
    path: Path
    created_at: datetime
    sequence: int  # the store's sequence number the backup holds at least
    seconds: float  # how long taking it took


def _utc_now() -> datetime:
    return datetime.now(UTC)


def store_id(data_dir: Path) -> str:
    """The id naming this data directory's backups in their manifests, made on first use."""
    path = data_dir / STORE_ID_NAME
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    made = uuid.uuid4().hex
    partial = data_dir / (_PARTIAL_PREFIX + STORE_ID_NAME)
    partial.write_text(made + "\n")
    _fsync(partial)
    os.rename(partial, path)
    _fsync(data_dir)
    return made


class BackupDir:
    """Backups under `root`; after each `take`, at most `keep` of those of the store `store_id`.
    Other stores' backups in the same root are listed but never pruned (docs/storage.md,
    "Backups and restore"). A backup whose manifest names no store (an earlier pml wrote none)
    is this store's when it names `data_dir`."""

    def __init__(
        self,
        root: Path,
        keep: int,
        store_id: str,
        data_dir: str | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        if not store_id:
            raise ValueError("store_id must not be empty")
        try:  # at start: a path that cannot be a directory failed every backup, told in logs
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ValueError(
                f"--backup-dir {root} cannot be the backup directory: it, or a folder above "
                "it, is a file"
            ) from None
        self.root = root
        self.keep = keep
        self.store_id = store_id
        self._data_dir = data_dir
        self._clock = clock

    def take(self, checkpoint: Callable[[Path], int], about: Mapping[str, object]) -> Backup:
        """Make one backup: `checkpoint(path)` writes the store's copy to a path that does not
        exist yet and returns its sequence number; `about` goes into the manifest. The backup
        is renamed into place only once its files and manifest are on disk."""
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(_PARTIAL_PREFIX + "*"):
            shutil.rmtree(leftover, ignore_errors=True)
        created_at = self._clock()
        name = BACKUP_PREFIX + created_at.strftime(_STAMP)
        final = self.root / name
        if final.exists():
            raise FileExistsError(f"{final} exists already")
        partial = self.root / (_PARTIAL_PREFIX + name)
        started = time.monotonic()
        try:
            sequence = checkpoint(partial)
            manifest = {
                "created_at": created_at.isoformat(),
                "sequence": sequence,
                **about,
                "store_id": self.store_id,
                "files": _file_digests(partial),
            }
            (partial / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
            _fsync_tree(partial)
            os.rename(partial, final)
            _fsync(self.root)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return Backup(final, created_at, sequence, time.monotonic() - started)

    def complete(self) -> list[Path]:
        """The whole backups, oldest first."""
        found = [
            path
            for path in self.root.glob(BACKUP_PREFIX + "*")
            if path.is_dir() and (path / MANIFEST_NAME).is_file()
        ]
        return sorted(found, key=lambda path: path.name)

    def own(self) -> list[Path]:
        """The whole backups of this store, oldest first: by the store's sequence number each
        holds, then by name. Never by name (its time) alone: a backup taken after the wall
        clock was set back is named earlier than those before it, and holds more
        (docs/storage.md, Backups and restore)."""
        found = [(self._sequence_if_own(path), path) for path in self.complete()]
        own = [(sequence, path.name, path) for sequence, path in found if sequence is not None]
        return [path for _, _, path in sorted(own)]

    def prune(self) -> list[Path]:
        """Remove all but the newest `keep` backups of this store; the removed ones."""
        removed = self.own()[: -self.keep]
        for path in removed:
            shutil.rmtree(path)
        return removed

    def _sequence_if_own(self, path: Path) -> int | None:
        """The store's sequence number the backup at `path` holds (0 if its manifest names
        none) when it is this store's; None when another's or not provably ours (an unreadable
        manifest: never removed)."""
        try:
            manifest = json.loads((path / MANIFEST_NAME).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict):
            return None
        if "store_id" in manifest:
            if manifest["store_id"] != self.store_id:
                return None
        elif self._data_dir is None or manifest.get("data_dir") != self._data_dir:
            return None
        sequence = manifest.get("sequence")
        return sequence if isinstance(sequence, int) else 0


def _file_digests(directory: Path) -> dict[str, dict[str, object]]:
    """Each file of the checkpoint: its size and SHA-256, which the first open of a restored copy
    checks (`verify_restored`)."""
    return {
        path.name: {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(directory.iterdir())
        if path.is_file()
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _well_formed(files: object) -> bool:
    return isinstance(files, dict) and all(
        isinstance(name, str)
        and name == Path(name).name
        and name not in ("", ".", "..")
        and isinstance(entry, dict)
        and isinstance(entry.get("bytes"), int)
        and isinstance(entry.get("sha256"), str)
        for name, entry in files.items()
    )


def verify_restored(data_dir: Path) -> None:
    """Before a store is opened in `data_dir`: when it is a copy of a backup never served yet
    (its manifest is there), check every file the manifest lists, then rename the manifest to
    `RESTORED_NAME` (from the first open on, the store's files change). RocksDB opens a copy
    with a truncated MANIFEST or WAL file as a store holding less, or nothing, and deletes the
    table files the truncated MANIFEST no longer names: RestoreRefusedError naming the file
    instead, before anything is written. A manifest of an earlier pml lists no files: nothing
    to check."""
    # pml never makes a backup inside a data directory (`--backup-dir` there is refused): one
    # copied in whole would leave the store it was meant to replace served, or a new empty one
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for inside in sorted(data_dir.iterdir()):
            if (inside / MANIFEST_NAME).is_file():
                raise RestoreRefusedError(
                    f"{inside} is a backup copied into the data directory {data_dir}: the "
                    f"store is its contents (cp -a {inside}/. NEW_DIR, or serve a copy of it "
                    "as --data-dir)"
                )
    manifest_path = data_dir / MANIFEST_NAME
    # a backup served in place stops being one: its manifest renamed, its files written
    if data_dir.name.startswith(BACKUP_PREFIX) and manifest_path.is_file():
        raise RestoreRefusedError(
            f"--data-dir {data_dir} is a backup: restore it first, as a copy in a new "
            f"directory (cp -a {data_dir} NEW_DIR), and serve the copy"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as err:
        raise RestoreRefusedError(f"backup manifest {manifest_path} is unreadable: {err}") from err
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if files is None:
        return
    if not _well_formed(files):
        raise RestoreRefusedError(
            f"backup manifest {manifest_path} is unreadable: its files are not a list of names "
            "with their bytes and sha256"
        )
    # RocksDB's files of a store that was there before the copy: it would open the backup's
    # MANIFEST and drop them, or replay a WAL of theirs into the restored store
    before = sorted(
        path.name
        for pattern in _STORE_FILES
        for path in data_dir.glob(pattern)
        if path.name not in files
    )
    if before:
        raise RestoreRefusedError(
            f"{data_dir} held a store before the backup was copied into it ({', '.join(before)} "
            "are not the backup's): copy the backup into a new, empty directory"
        )
    for name, expected in sorted(files.items()):
        path = data_dir / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise RestoreRefusedError(
                f"backup file {path} is missing (the backup's manifest lists it): restore "
                "from a whole copy of the backup"
            ) from None
        if size != expected["bytes"] or _sha256(path) != expected["sha256"]:
            what = (
                f"has {size} bytes, the backup wrote {expected['bytes']}"
                if size != expected["bytes"]
                else "has other bytes than the backup wrote (SHA-256 differs)"
            )
            raise RestoreRefusedError(
                f"backup file {path} {what}: restore from a whole copy of the backup, or "
                "from another backup"
            )
    with contextlib.suppress(FileNotFoundError):  # a server starting beside: one renames it
        os.rename(manifest_path, data_dir / RESTORED_NAME)
    _fsync(data_dir)


def _fsync_tree(directory: Path) -> None:
    """Every file of `directory`, then the directory itself: its entries must be on disk
    before the rename that makes the backup visible."""
    for path in directory.iterdir():
        if path.is_file():
            _fsync(path)
    _fsync(directory)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
