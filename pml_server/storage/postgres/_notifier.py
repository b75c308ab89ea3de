"""Waking the followers of the op log: LISTEN/NOTIFY on `NOTIFY_CHANNEL`.

A NOTIFY is a wake-up only, not durable, so followers poll as well (`replication`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

from pml_server.storage.postgres._transactions import Connection

NOTIFY_CHANNEL = "pml_oplog"


def listen(connect: Callable[[], Connection]) -> Connection:
    """A dedicated connection LISTENing for op log commits (`notifies()` wakes on them)."""
    conn = connect()
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
    return conn


class Notifier:
    """NOTIFYs the followers, after the commit and outside it: a NOTIFY in the writing
    transaction takes a database-wide lock until that transaction's commit is flushed, which
    queued every op log writer behind every other. One notifier thread sends one NOTIFY per
    burst of commits (it is only a wake-up; followers poll as well)."""

    def __init__(self, connect: Callable[[], Connection]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wanted = threading.Event()
        self._closed = False

    def wake(self) -> None:
        """Ask for a NOTIFY (the thread starts with the first)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="pml-notifier", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _loop(self) -> None:
        conn: Connection | None = None
        while True:
            self._wanted.wait()
            if self._closed:
                break
            self._wanted.clear()
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                conn.execute("SELECT pg_notify(%s, '')", (NOTIFY_CHANNEL,))
            except psycopg.Error:  # the followers' poll covers it; retried at the next commit
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """The thread exits (it does not wait for it)."""
        self._closed = True
        self._wanted.set()
