"""RocksDB store: opening, schema versioning and closing.

This module alone imports rocksdict. It stores a schema version under a meta key and refuses to
open a store written by a newer schema than this code knows.
"""

from __future__ import annotations

import struct
from pathlib import Path

from rocksdict import Options, Rdict

SCHEMA_VERSION = 1
_META_SCHEMA_KEY = b"meta/schema_version"


class SchemaVersionError(RuntimeError):
    """The store on disk was written by a newer, unknown schema."""


class Store:
    """An open RocksDB database in `path`; created on first use."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(str(path), options)
        self.path = path
        self.schema_version = self._check_schema()

    def _check_schema(self) -> int:
        raw = self._db.get(_META_SCHEMA_KEY)
        if raw is None:
            self._db.put(_META_SCHEMA_KEY, struct.pack(">I", SCHEMA_VERSION))
            return SCHEMA_VERSION
        found = int(struct.unpack(">I", raw)[0])
        if found > SCHEMA_VERSION:
            self._db.close()
            raise SchemaVersionError(
                f"store at {self.path} has schema version {found}; this pml knows up to "
                f"{SCHEMA_VERSION}: upgrade pml to open it"
            )
        return found

    def close(self) -> None:
        self._db.flush()
        self._db.close()
