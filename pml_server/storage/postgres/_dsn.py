"""Describing a PostgreSQL DSN in messages without its password."""

from __future__ import annotations

import re

from psycopg.conninfo import conninfo_to_dict

# What libpq quotes of a connection string it cannot read (`invalid percent-encoded token:
# "..."`): any part of it, the password included.
_QUOTED = re.compile(r'"[^"]*"')


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


def problem(dsn: str) -> str | None:
    """Why libpq cannot read `dsn`, without quoting any of it (the part it names may be the
    password: docs/operations.md, Secrets outside the store); None when it reads it."""
    try:
        conninfo_to_dict(dsn)
    except Exception as err:  # psycopg.ProgrammingError, whatever libpq could not read
        return _QUOTED.sub('"..."', str(err).strip().splitlines()[0] if str(err) else "")
    return None


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
