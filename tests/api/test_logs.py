"""The server's log lines (`pml_server.api.logs`): one line an event in either format, whatever
the message or its traceback holds."""

from __future__ import annotations

import logging

import psycopg
import pytest

from pml_server.api import logs
from testing.postgres_cluster import free_port


def _libpq_error() -> psycopg.OperationalError:
    """A real libpq failure (nothing listens on the port): its message spans lines."""
    try:
        psycopg.connect(f"postgresql://pml@127.0.0.1:{free_port()}/pml", connect_timeout=5)
    except psycopg.OperationalError as error:
        return error
    raise AssertionError("a connection to a closed port succeeded")


@pytest.mark.parametrize("json_format", [True, False])
def test_a_libpq_error_and_its_traceback_are_one_log_line(json_format: bool) -> None:
    """docs/operations.md, Logs. The text format wrote libpq's "Connection refused" and its
    "Is the server running on that host...?" on two lines (and the traceback on more): one
    event read as several by anything that reads a log a line at a time."""
    error = _libpq_error()
    assert "\n" in str(error)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("info", json_format=json_format)
        [handler] = root.handlers
        record = logging.LogRecord(
            "pml_server.replication._follower", logging.WARNING, __file__, 1,
            "op log follower: %s", (error,), (type(error), error, error.__traceback__),
        )  # fmt: skip
        line = handler.format(record)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    assert "\n" not in line
    assert "Is the server running" in line
    assert "Traceback" in line
