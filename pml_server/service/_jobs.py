"""The engine's background jobs: restoring the search indexes at open, snapshotting them while
running (and at close), applying the retention table on an interval, and once per store
re-keying (before ready) and renaming (while serving) what an older build's normalizer left,
then summarizing the shown intents its counters lack, storing again the steps of patterns
stored under other steps rules and redacting its free texts by today's rules (while serving)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pml_server import __version__
from pml_server.backup import BackupDir, BackupJob, store_id
from pml_server.domain.errors import UnavailableError
from pml_server.service._curation import erase_left_deletions, run_retention
from pml_server.service._free_text import redact_free_texts
from pml_server.service._heap import release_free_memory
from pml_server.service._older_builds import (
    read_steps_again,
    rekey_tool_names,
    rename_placeholders,
    summarize_intents,
)
from pml_server.service._restore import restore_indexes
from pml_server.service._state import EngineState
from pml_server.service._suggest_core import fill_rank_tables
from pml_server.storage import SCHEMA_VERSION
from pml_server.storage.seam import Op

log = logging.getLogger(__name__)


class OpenPass:
    """A pass an open runs once per store over an older build's rows, while serving: how many
    rows it rewrote once over, or what made it fail (no marker is written, so the next open
    retries; docs/storage.md, Migrations)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._done = threading.Event()
        self._count = 0
        self._error: BaseException | None = None

    def run(self, body: Callable[[], int]) -> None:
        try:
            self._count = body()
        except Exception as error:
            log.exception("%s failed; next open retries", self._what)
            self._error = error
        finally:
            self._done.set()

    def failed(self, error: BaseException) -> None:
        """The open failed before the pass could run."""
        self._error = error
        self._done.set()

    def wait(self, timeout: float | None) -> int:
        """Until the pass is over: how many rows it rewrote; raises what made it fail."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self._what} is still running")
        if self._error is not None:
            raise self._error
        return self._count


class BackgroundJobs:
    def __init__(self, state: EngineState) -> None:
        self._state = state
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.backups = _backup_job(state)
        # the passes over an older build's rows an open runs while serving
        # (service/_older_builds.py)
        self.placeholders = OpenPass("renaming an older build's placeholder names")
        self.summaries = OpenPass("summarizing an older build's counters")
        self.steps = OpenPass("storing the steps of patterns stored under other steps rules")
        self.free_texts = OpenPass("redacting an older build's free texts")
        # patterns moved to today's hash at open (service/_older_builds.py)
        self.patterns_rekeyed = 0

    def start(self) -> None:
        """Restore the search indexes in the background (and start the periodic jobs)."""
        self._spawn(self._load_indexes, "pml-index-loader")
        if self._state.config.snapshot_interval_seconds > 0:
            self._spawn(self._snapshot_loop, "pml-snapshots")
        if self._state.config.retention_in_background:
            self._spawn(self._retention_loop, "pml-retention")
        backups = self.backups
        if backups is not None:
            self._spawn(lambda: backups.run(self._stop), "pml-backups")

    def stop(self) -> bool:
        """Stop and join every job; False when they were already stopped."""
        if self._stop.is_set():
            return False
        self._stop.set()
        if self.backups is not None:
            self.backups.request()  # wakes its thread, which then sees the stop
        for thread in self._threads:
            thread.join(timeout=30)
        return True

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _load_indexes(self) -> None:
        state = self._state
        follower = state.follower
        try:
            if follower is not None:
                follower.begin()  # before the restore reads: nothing committed is missed
            restored = restore_indexes(
                state.repo,
                state.config.vector_index,
                state.embedder.dim,
                state.indexes.companion_dim,
            )
            # over a shared store, what others write meanwhile the follower's catch-up applies
            fill_rank_tables(state.repo, restored)
            state.indexes.replace_all(restored)
            if follower is not None:
                follower.catch_up()
            # Nothing writes before ready: snapshot now so the next start replays nothing.
            write_snapshots(state, trim_oplog=True)
            for tenant in restored:
                # Read every counter once now rather than in some tenant's first Suggest (at
                # 100k patterns that call took seconds, and held up the calls behind it).
                state.repo.patterns.counter_ceilings(tenant)
            # once per store, before any capture can look for the new hashes
            # (docs/normalization.md, Tool calls)
            try:
                self.patterns_rekeyed = rekey_tool_names(state, self._stop)
            except Exception:  # retried at the next open: the marker is not written
                log.exception("re-keying an older build's patterns failed; next open retries")
            if self.patterns_rekeyed:
                log.info("moved %d patterns to today's code hash", self.patterns_rekeyed)
            release_free_memory()  # what the restore freed stays with the process otherwise
            if follower is not None:  # other replicas' writes, from now on
                self._spawn(lambda: follower.run(self._stop), "pml-follower")
            state.readiness.set_ready()
        except BaseException as error:  # reported by wait_ready; is_ready stays False
            state.readiness.set_failed(error)
            self.placeholders.failed(error)  # never run: their waiters hear why
            self.summaries.failed(error)
            self.steps.failed(error)
            self.free_texts.failed(error)
            return
        try:
            erase_left_deletions(state)
        except Exception:  # the rows stay marked: the next open tries again
            log.exception("erasing the rows of deletions a close left on disk failed")
        # once per store, while serving: each rewrite holds only its pattern's lock
        # (docs/normalization.md, Placeholder names; docs/capture.md, The intents a view shows)
        self.placeholders.run(lambda: rename_placeholders(state, self._stop))
        self.summaries.run(lambda: summarize_intents(state, self._stop))
        # after the renaming, whose rewrites store steps too (docs/normalization.md, Steps)
        self.steps.run(lambda: read_steps_again(state, self._stop))
        # once per store and redaction rules (docs/capture.md, Secrets)
        self.free_texts.run(lambda: redact_free_texts(state, self._stop))

    def _snapshot_loop(self) -> None:
        interval = self._state.config.snapshot_interval_seconds
        while not self._stop.wait(interval):
            if not self._state.readiness.is_ready():
                continue
            try:
                write_snapshots(self._state, trim_oplog=False)
            except Exception as err:  # retried at the next interval and at close; told
                log.error(
                    "writing the index snapshots failed: %s; retried in %s s",
                    err,
                    interval,
                    exc_info=not isinstance(err, UnavailableError),
                )

    def _retention_loop(self) -> None:
        interval = self._state.config.retention.interval_seconds
        while not self._stop.wait(interval):
            for tenant in self._state.indexes.tenants():
                try:
                    run_retention(self._state, tenant, apply=True)
                except Exception as err:  # the next interval tries again; the operator is told
                    log.error(
                        "retention of tenant %r failed: %s; retried in %s s",
                        tenant,
                        err,
                        interval,
                        exc_info=not isinstance(err, UnavailableError),
                    )


def _backup_job(state: EngineState) -> BackupJob | None:
    """The job backing up the store into `backup_dir` (None when there is none). The store's
    checkpoint holds the index snapshots and op log too, so a server started on a backup
    restores its indexes as after a restart."""
    config = state.config
    if config.backup_dir is None:
        return None
    data_dir = str(config.data_dir)
    about = {
        "pml_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "embedding_model": state.embedder.model_id,
        "data_dir": data_dir,
    }
    backups = BackupDir(
        config.backup_dir, config.backup_keep, store_id(config.data_dir), data_dir=data_dir
    )
    return BackupJob(backups, state.store.checkpoint, about, config.backup_interval_seconds)


def write_snapshots(state: EngineState, trim_oplog: bool) -> None:
    """Persist every changed tenant's vector index. Trimming the op log is only safe when no
    capture or deletion runs (at open before ready, at close after the API drained):
    otherwise a removal the snapshot missed could be dropped from the log."""
    indexes = state.indexes.all()
    seq = state.ids.seq.last_issued()
    follower = state.follower
    # An index unchanged since its stored snapshot holds every removal logged so far, so
    # trimming the log stays safe without writing it again. Over a shared store a snapshot's
    # position is the follower's cursor, read before the snapshot: it holds every entry
    # through it (the store keeps the snapshot at the latest position any replica wrote).
    taken = {
        t: (seq if follower is None else follower.cursor(t), i.snapshot())
        for t, i in indexes.items()
        if i.saves.unsaved()
    }
    ops: list[Op] = [
        state.repo.meta.put_snapshot(t, position, data)
        for t, (position, (data, _)) in taken.items()
    ]
    if trim_oplog:
        ops += state.repo.logs.delete_oplog_through(seq)
    if ops:
        state.store.write(ops)
    for tenant, (_, (_, changes)) in taken.items():
        indexes[tenant].saves.mark_saved(changes)
