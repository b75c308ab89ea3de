"""The only package that talks to RocksDB (through rocksdict)."""

from pml_server.storage.rocks import SCHEMA_VERSION, SchemaVersionError, Store, StoreInUseError

__all__ = ["SCHEMA_VERSION", "SchemaVersionError", "Store", "StoreInUseError"]
