"""Reloading the API keys file while serving: on SIGHUP, and by itself when the file changes
(a poll of its stat; `pml keys add` and `pml keys revoke` replace it atomically, so a change is
a new inode or mtime). A file that fails to load keeps the keys in force and is logged."""

from __future__ import annotations

import logging
import os
import threading

from pml_server.api.security.auth import KeyStore

log = logging.getLogger("pml.keys")
POLL_SECONDS = 1.0


def _signature(store: KeyStore) -> tuple[int, int, int, int] | None:
    assert store.path is not None
    try:
        st = os.stat(store.path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_ctime_ns)


class KeysFileWatcher:
    """Keeps `store` in step with its file until `stop()`."""

    def __init__(self, store: KeyStore, poll_seconds: float = POLL_SECONDS) -> None:
        self._store = store
        self._poll = poll_seconds
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._seen = _signature(store) if store.path is not None else None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._store.path is None:
            return
        self._thread = threading.Thread(target=self._run, name="pml-keys-watch", daemon=True)
        self._thread.start()

    def reload(self, reason: str) -> bool:
        """Reload now; True when the new keys are in force. Without a keys file (single
        tenant) there is nothing to reload: a SIGHUP (logrotate sends one) is logged, and the
        server goes on."""
        if self._store.path is None:
            log.info("no keys file to reload (%s): the server is single-tenant", reason)
            return False
        with self._lock:
            self._seen = _signature(self._store)
            try:
                count = self._store.reload()
            except (OSError, ValueError, KeyError, TypeError) as err:
                log.error("keys file not reloaded (%s): %s; the previous keys stay", reason, err)
                return False
            log.info("keys file reloaded (%s): %d keys", reason, count)
            return True

    def _run(self) -> None:
        while not self._stopped.wait(self._poll):
            if _signature(self._store) != self._seen:
                self.reload("file changed")

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
