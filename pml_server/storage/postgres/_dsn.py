"""Describing a PostgreSQL DSN in messages without its password."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict


def describe(dsn: str) -> str:
    """`host:port/dbname` of `dsn` (libpq defaults where unset); never the password."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN: say so without echoing it (it may hold a password)
        return "<unparsable DSN>"
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = str(parts.get("port") or "5432")
    dbname = str(parts.get("dbname") or parts.get("user") or "")
    return f"{host}:{port}/{dbname}"


def has_password(dsn: str) -> bool:
    try:
        return bool(conninfo_to_dict(dsn).get("password"))
    except Exception:
        return False


def scrub(text: str, dsn: str) -> str:
    """`text` (e.g. a driver's error message) with the DSN's password removed, if it held one."""
    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:
        return text
    return text.replace(str(password), "***") if password else text
