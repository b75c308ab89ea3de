"""The backup job: one thread taking a backup when asked (SIGUSR2) and on its schedule."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pml_server.backup._dir import BackupDir

log = logging.getLogger("pml_server.backup")


@dataclass(frozen=True)
class BackupStatus:
    taken: int = 0
    failed: int = 0
    last_success_unix: float | None = None  # wall-clock seconds of the last whole backup
    prunes_failed: int = 0  # backups written whose older ones could not be removed


class BackupJob:
    """`run` (the job's thread) takes a backup each time `request` is called and every
    `interval_seconds` (0: only when asked). A failed backup is logged and counted, never
    retried at once: the next request or interval tries again."""

    def __init__(
        self,
        backups: BackupDir,
        checkpoint: Callable[[Path], int],
        about: Mapping[str, object],
        interval_seconds: float,
    ) -> None:
        self._backups = backups
        self._checkpoint = checkpoint
        self._about = dict(about)
        self._interval = interval_seconds or None
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._status = BackupStatus()

    def request(self) -> None:
        """A backup as soon as the one under way (if any) is done. A signal handler calls it
        on the main thread: it takes only this event's lock, which only the job's own thread
        ever waits on, so the main thread never holds it when the handler runs."""
        self._wanted.set()

    def status(self) -> BackupStatus:
        with self._lock:
            return self._status

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set (then call `request` too, to wake the thread)."""
        while True:
            self._wanted.wait(self._interval)
            if stop.is_set():
                return
            self._wanted.clear()
            self.take_one()

    def take_one(self) -> None:
        try:
            backup = self._backups.take(self._checkpoint, self._about)
        except Exception as err:  # disk full, permissions: the server goes on serving
            with self._lock:
                self._status = replace(self._status, failed=self._status.failed + 1)
            log.error("backup failed: %s", err, exc_info=err)
            return
        with self._lock:
            self._status = replace(
                self._status, taken=self._status.taken + 1, last_success_unix=time.time()
            )
        try:
            removed = self._backups.prune()
        # the backup is whole: older ones stay (docs/operations.md, Backups and restore)
        except Exception as err:
            with self._lock:
                self._status = replace(self._status, prunes_failed=self._status.prunes_failed + 1)
            log.error("backup written, but older backups not removed: %s", err, exc_info=err)
            removed = []
        log.info(
            "backup written",
            extra={
                "path": str(backup.path),
                "sequence": backup.sequence,
                "seconds": round(backup.seconds, 3),
                "removed": [str(p) for p in removed],
            },
        )
