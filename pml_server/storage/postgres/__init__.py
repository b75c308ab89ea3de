"""The shared store of several pml replicas: PostgreSQL through psycopg 3 and its pool."""

from pml_server.storage.postgres._dsn import describe, has_password, problem
from pml_server.storage.postgres._repository import SharedRepository
from pml_server.storage.postgres._schema import SCHEMA_VERSION, SchemaVersionError
from pml_server.storage.postgres._store import PostgresStore, StoreUnreachableError
from pml_server.storage.postgres._transactions import DEFAULT_POOL_SIZE

__all__ = [
    "DEFAULT_POOL_SIZE",
    "SCHEMA_VERSION",
    "PostgresStore",
    "SchemaVersionError",
    "SharedRepository",
    "StoreUnreachableError",
    "describe",
    "has_password",
    "problem",
]
