"""Following the shared store's op log into this replica's in-memory indexes.

At start `begin` reads every tenant's op log head *before* the indexes are restored from the
store, so an entry committed during the restore is applied again afterwards rather than
missed: applying is idempotent (an intent already indexed is skipped, removing an absent one
does nothing, an addition whose intent row is gone since is skipped). Then `run` waits for a
NOTIFY (a wake-up only: not durable) or at most `poll_seconds`, and applies every tenant's
entries after its cursor. Sequences come from a per-tenant head row updated inside each
writing transaction, so commit order is sequence order and `seq > cursor` never skips one.

This replica's own writes are already in its indexes (the engine applies them at once): the
follower meets them again and skips them.

The ranking tables (pattern records and counters, what Suggest ranks in the core without
reading the store) follow another feed: every catch-up reads the pattern and counters rows
written by transactions its last snapshot did not see, with the keys of the intent rows
written so (`OpLog.changes`, one statement a page; counting takes no op log entry, so
captures never queue on the head row for it). A row is read as it is now, so one read late
(before this replica's own later write) is set right by the next. The same feed, and the op
log's removals, drop the changed patterns from the repository's cache of views, but for the
rows of this replica's own commits (each dropped its views once committed:
`SharedViews.forget_changed`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from pml_server.domain.errors import UnavailableError, logged_error
from pml_server.domain.records import IntentRecord
from pml_server.replication._lag import FollowerLag
from pml_server.search import TenantSearchIndex
from pml_server.search.tenant import compact_worn
from pml_server.storage.keys import CF_PATTERNS, split_tenant
from pml_server.storage.postgres import SharedRepository
from pml_server.storage.postgres._oplog import CHANGES_PAGE, FeedPosition, OpLog
from pml_server.storage.repo import counter_rank_row, pattern_rank_row

log = logging.getLogger(__name__)
DEFAULT_POLL_SECONDS = 0.5
_LAG_WINDOW = 4096  # recent entries the lag percentiles are taken over
_BATCH = 1000
# The longest wait before a failed catch-up is retried (docs/storage.md, Replicas): a
# PostgreSQL restart of a second is followed within about this much more, not after a
# back-off that doubled through it.
MAX_BACKOFF_SECONDS = 2.0


class OplogFollower:
    def __init__(
        self,
        oplog: OpLog,
        repo: SharedRepository,
        index_for: Callable[[str], TenantSearchIndex],
        rebuild: Callable[[str], None],
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self._oplog = oplog
        self._repo = repo
        self._index_for = index_for
        self._rebuild = rebuild  # installs a tenant's indexes rebuilt from the store
        self.rebuilds = 0  # tenants rebuilt after a gap in the op log
        self._poll_seconds = poll_seconds
        self._cursors: dict[str, int] = {}
        self._lags: deque[float] = deque(maxlen=_LAG_WINDOW)
        self._applied = 0
        self._behind = 0
        self._lock = threading.Lock()  # one catch-up at a time
        # the position the last read of changed rows saw (None: not begun)
        self._since: FeedPosition | None = None
        self._errors = 0  # catch-ups of `run` that failed
        self._stalled: str | None = None  # the error `run` is stuck on, other than the database's
        self._thread: threading.Thread | None = None  # the thread in `run`, once it started

    def begin(self) -> None:
        """Start from the current heads (call before restoring the indexes)."""
        self._cursors = self._oplog.heads()
        self._since = self._oplog.position()

    def cursor(self, tenant: str) -> int:
        """The tenant's op log position through which every entry is applied."""
        return self._cursors.get(tenant, 0)

    def catch_up(self) -> int:
        """Apply every committed entry after the cursors; how many were applied."""
        with self._lock:
            applied = 0
            heads = self._oplog.heads()
            self._behind = sum(max(0, h - self._cursors.get(t, 0)) for t, h in heads.items())
            for tenant, head in heads.items():
                while (cursor := self._cursors.get(tenant, 0)) < head:
                    entries = self._oplog.entries(tenant, cursor, _BATCH)
                    if not _follows(cursor, entries):
                        self._rebuild_after_gap(tenant, cursor)
                        self._behind = max(0, self._behind - (head - cursor))
                        continue
                    self._apply(tenant, entries)
                    self._cursors[tenant] = entries[-1][0]
                    applied += len(entries)
                    self._behind = max(0, self._behind - len(entries))
            self._applied += applied
            self._refresh_ranks()
            self._stalled = None  # every tenant's entries read and applied
            return applied

    def catch_up_tenant(self, tenant: str, timeout: float) -> bool:
        """Apply the tenant's committed entries after its cursor: its index then holds every
        intent committed before the call, as a capture's grouping needs (docs/capture.md,
        "Grouping a new pattern when the index settles it"). False, nothing applied, when
        another catch-up held the follower for `timeout` seconds (the caller reads the store:
        a capture waiting here holds a pooled connection the other catch-up may need).
        False too while the follower is stalled, and when this catch-up meets what stalls it
        (`_failed`): the capture reads the store, and the follower's thread retries."""
        if self._stalled is not None or not self._lock.acquire(timeout=timeout):
            return False
        try:
            while True:
                cursor = self.cursor(tenant)
                head, entries = self._oplog.head_and_entries(tenant, cursor, _BATCH)
                if head > cursor and not _follows(cursor, entries):
                    self._rebuild_after_gap(tenant, cursor)
                    continue
                if not entries:
                    break
                self._apply(tenant, entries)
                self._cursors[tenant] = entries[-1][0]
                self._applied += len(entries)
        except (psycopg.Error, UnavailableError):
            raise  # the database's: the capture answers UNAVAILABLE
        except Exception as error:
            self._failed(error, "the capture reads the store")
            return False
        finally:
            self._lock.release()
        return True

    def _failed(self, error: Exception, then: str) -> None:
        """One decision for a catch-up that failed, by the follower's thread or a capture's
        (docs/storage.md, Replicas): counted (`FollowerLag.errors`) and logged, its message
        clipped; an error not the database's (an op log entry this build cannot read) marks
        the follower stalled, the entry left where it is, until a whole catch-up succeeds.
        `then` says what happens next."""
        self._errors += 1
        detail = f"{type(error).__name__}: {logged_error(error)}"
        if isinstance(error, psycopg.Error | UnavailableError):
            log.warning("op log follower: %s; %s", detail, then)
            return
        self._stalled = detail
        log.error(
            "op log follower stalled: %s; this replica's indexes no longer follow the store; %s",
            detail,
            then,
        )

    def _rebuild_after_gap(self, tenant: str, cursor: int) -> None:
        """The tenant's entries after `cursor` are trimmed (`_oplog.trim`: this follower was
        cut off from the store longer than `OPLOG_KEEP`): applying the rest would leave the
        index without what they added (or with what they removed). Its indexes are rebuilt
        from the store instead, as at open, and installed (Suggests holding the old ones finish
        on them); the cursor moves to the head read in the same snapshot, so what commits
        during the rebuild is applied after it (docs/storage.md, "Op log gaps")."""
        log.warning(
            "op log follower: tenant %r's entries after %d were trimmed before this replica "
            "applied them; rebuilding its indexes from the store",
            tenant,
            cursor,
        )
        with self._repo.consistent_reads():
            head = self._oplog.heads().get(tenant, cursor)
            self._rebuild(tenant)
        self._cursors[tenant] = max(head, cursor)
        self.rebuilds += 1

    def _refresh_ranks(self) -> None:
        """Pattern records before counters: a new pattern's counters find its row."""
        if self._since is None:
            return
        position = self._since
        for page in self._oplog.changes(self._since):  # bounded pages, one position to go on
            for key, raw in page.patterns:
                self._index_for(split_tenant(key)[0]).ranks.set_pattern(*pattern_rank_row(raw))
            for key, raw in page.counters:
                tenant, rest = split_tenant(key)
                self._index_for(tenant).ranks.set_counters(*counter_rank_row(rest.decode(), raw))
            # this replica's own commits dropped their views already
            self._repo.views.forget_changed(page.written)
            position = page.position
        self._since = position
        self._repo.views.followed_to(position.snapshot)

    def _apply(self, tenant: str, entries: Sequence[tuple[int, dict[str, Any], float]]) -> None:
        index = self._index_for(tenant)
        pending: list[int] = []
        for _, op, _ in entries:
            if op["op"] == "add":
                pending += op["ids"]
            else:  # a removal: additions logged before it first
                self._add(tenant, index, pending)
                pending = []
                gone = {p for i in op["ids"] if (p := index.pattern_of(i)) is not None}
                self._repo.views.forget_views((tenant, p) for p in gone)
                index.remove(op["ids"])
                compact_worn(index)
                self._forget_deleted(tenant, index, gone)
        self._add(tenant, index, pending)
        now_lags = [age for _, _, age in entries]
        self._lags.extend(now_lags)

    def _forget_deleted(self, tenant: str, index: TenantSearchIndex, patterns: set[str]) -> None:
        """Take the patterns another replica deleted out of the ranking table: those of
        `patterns` left without an indexed intent and whose record is gone (one query). Their
        rows stayed (no feed row tells a deletion), one a deleted pattern until a restart."""
        empty = [p for p in patterns if not index.intents_of(p)]
        present = self._oplog.patterns_present(tenant, empty)
        for pattern_id in empty:
            if pattern_id not in present:
                index.ranks.remove_pattern(pattern_id)

    def _add(self, tenant: str, index: TenantSearchIndex, intent_ids: list[int]) -> None:
        fresh = [i for i in intent_ids if not index.ann.contains(i)]
        if not fresh:
            return
        intents = [IntentRecord.from_json(raw) for raw in self._oplog.intents_by_id(tenant, fresh)]
        tools: dict[str, tuple[str, ...]] = {}
        patterns = list(dict.fromkeys(intent.pattern_id for intent in intents))
        for start in range(0, len(patterns), CHANGES_PAGE[CF_PATTERNS]):  # a page a statement
            ids = patterns[start : start + CHANGES_PAGE[CF_PATTERNS]]
            for pattern_id, record in zip(
                ids, self._repo.patterns.patterns_by_id(tenant, ids), strict=True
            ):
                tools[pattern_id] = record.tools_used if record is not None else ()
        if intents:
            index.add_many([(i, tools[i.pattern_id]) for i in intents])

    def lag(self) -> FollowerLag:
        values = sorted(self._lags)
        if not values:
            return FollowerLag(
                self._applied, 0.0, 0.0, self._behind, self.rebuilds, self._errors, self.stalled()
            )

        def at(q: float) -> float:
            return values[min(len(values) - 1, int(q * len(values)))]

        return FollowerLag(
            self._applied,
            at(0.5),
            at(0.99),
            self._behind,
            self.rebuilds,
            self._errors,
            self.stalled(),
        )

    def run(self, stop: threading.Event) -> None:
        """Follow until `stop` is set: LISTEN wake-ups, a bounded poll when none comes, and
        reconnection when the database goes away. Any error is survived: logged (its message
        clipped), counted (`FollowerLag.errors`), and retried after `backoff`. An error that
        is not the database's (an op log entry this build cannot read) marks the follower
        stalled until a catch-up succeeds: the replica's health says NOT_SERVING meanwhile,
        as its indexes no longer follow the store (docs/storage.md, Replicas)."""
        self._thread = threading.current_thread()
        failures = 0
        while not stop.is_set():
            listener: psycopg.Connection[tuple[Any, ...]] | None = None
            try:
                listener = self._oplog.listen()
                self.catch_up()  # entries committed before LISTEN took effect
                failures = 0
                while not stop.is_set():
                    for _ in listener.notifies(timeout=self._poll_seconds, stop_after=1):
                        pass
                    self.catch_up()
            except Exception as error:  # any error: the thread must go on
                failures += 1
                wait = backoff(self._poll_seconds, failures)
                self._failed(error, f"retrying in {wait:.1f} s")
                stop.wait(wait)
            finally:
                if listener is not None:
                    with contextlib.suppress(psycopg.Error):
                        listener.close()

    def stalled(self) -> str | None:
        """Why the follower no longer applies the op log (None: it follows): an error it is
        stuck on, or its thread no longer alive, whatever ended it (a BaseException `run`
        does not survive, the engine closed): docs/storage.md, Replicas."""
        thread = self._thread
        if thread is not None and not thread.is_alive():
            return f"its thread {thread.name!r} ended; this replica no longer follows the store"
        return self._stalled


def backoff(poll_seconds: float, failures: int) -> float:
    """The wait after the `failures`-th failed catch-up in a row: doubling from the poll
    interval, capped at `MAX_BACKOFF_SECONDS`, the upper half of it drawn at random so that
    replicas cut off together do not retry in step."""
    ceiling = min(poll_seconds * 2 ** min(failures - 1, 32), MAX_BACKOFF_SECONDS)
    return random.uniform(ceiling / 2, ceiling)


def _follows(cursor: int, entries: Sequence[tuple[int, Any, float]]) -> bool:
    """Whether `entries` (read in sequence order after `cursor`) are the very next ones, with
    none missing: sequences are contiguous per tenant, so any other answer is a gap (entries
    trimmed, `_rebuild_after_gap`). Not only the first: `written_at` is the server's wall
    clock, which can step back, so a trim by age can take an entry and keep the one before it
    (docs/storage.md, "Op log gaps")."""
    return bool(entries) and entries[-1][0] == cursor + len(entries)


def wait_caught_up(follower: OplogFollower, timeout: float) -> bool:
    """True once a catch-up finds nothing left to apply (for tests and start-up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        follower.catch_up()
        if follower.lag().behind == 0:
            return True
    return False
