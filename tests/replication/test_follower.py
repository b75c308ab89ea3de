"""The op log follower of a replica over a shared PostgreSQL store (real throwaway cluster,
real engines, hashing embedder): what it does with an op log entry this build cannot read,
on every path that applies the op log, and how health learns that it no longer follows."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from pml_server.domain.model import CaptureOutcome, SuggestQuery
from pml_server.service import Engine
from pml_server.storage.keys import tenant_key
from testing.postgres_cluster import PostgresCluster
from tests.support import Clock, make_record, open_engine

JSON_TOOLS = ["fs.read", "json.parse"]
WAIT_SECONDS = 20.0
T = TypeVar("T")


def _eventually(check: Callable[[], bool]) -> bool:
    """`check` held once within WAIT_SECONDS (an error of a database coming back: not yet)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except Exception:  # the database not back yet
            pass
        time.sleep(0.05)
    return False


def _first_answer(call: Callable[[], T]) -> T:
    """What `call` returns once the database answers again (UNAVAILABLE until then)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            return call()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _bad_entry(dsn: str, tenant: str) -> int:
    """An op log entry this build cannot decode, written straight into PostgreSQL after the
    tenant's head (a damaged row, a newer build's); its sequence."""
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute("SELECT seq FROM pml_oplog_head WHERE tenant = %s", (tenant,))
        (head,) = row.fetchone() or (0,)
        db.execute(
            "INSERT INTO pml_oplog (tenant, seq, op) VALUES (%s, %s, %s)",
            (tenant, head + 1, b"\xff" + b"x" * 100_000),
        )
        db.execute("UPDATE pml_oplog_head SET seq = %s WHERE tenant = %s", (head + 1, tenant))
    return int(head + 1)


def test_a_capture_meeting_an_entry_it_cannot_read_succeeds_and_marks_the_follower_stalled(
    replicas: Callable[[str], Engine],
    postgres_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A capture's own catch-up (`catch_up_tenant`, before grouping a new pattern) raised
    the entry's UnicodeDecodeError out of the capture (UNKNOWN to a client). It now does what
    the follower's thread does with the same entry (docs/storage.md, Replicas): logs it
    clipped, counts it, marks the follower stalled (health NOT_SERVING); the capture reads
    the store instead, as when the follower is busy. The entry removed, the next catch-up
    applies the rest and the follower is no longer stalled."""
    a, b = replicas("a"), replicas("b")
    follower = b._state.follower
    assert follower is not None
    catch_up = follower.catch_up
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # the thread applies nothing now
    with follower._lock:  # a catch-up under way ends first
        pass
    a.record("t", make_record("a1", "Read JSON file", JSON_TOOLS, code="f()"))
    seq = _bad_entry(postgres_dsn, "t")
    caplog.set_level(logging.WARNING, logger="pml_server.replication._follower")
    result = b.record("t", make_record("b1", "Parse the JSON text", JSON_TOOLS, code="g()"))
    assert result.outcome == CaptureOutcome.SAVED
    lag = b.admin.follower_lag()
    assert lag is not None
    assert lag.stalled is not None
    assert "UnicodeDecodeError" in lag.stalled
    assert lag.errors >= 1
    stalled = [r.getMessage() for r in caplog.records if "follower stalled" in r.msg]
    assert stalled
    assert max(len(line) for line in stalled) < 1000
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("DELETE FROM pml_oplog WHERE tenant = 't' AND seq = %s", (seq,))
    catch_up()
    lag = b.admin.follower_lag()
    assert lag is not None
    assert lag.stalled is None


# the SystemExit ends the thread unhandled, as it would in production
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_follower_thread_ended_by_a_base_exception_is_reported_stalled(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's thread survives any Exception, but not a BaseException (SystemExit
    here: KeyboardInterrupt, GeneratorExit, a cancellation); the thread ended, the replica
    went on SERVING stale indexes, as only the errors it caught marked it stalled. Whether
    it follows is now read from the thread itself (`is_alive`), whatever ended it."""
    b = replicas("b")
    follower = b._state.follower
    assert follower is not None
    [thread] = [t for t in threading.enumerate() if t.name == "pml-follower"]
    assert follower.lag().stalled is None

    def ended() -> int:
        raise SystemExit("ended inside the follower")

    monkeypatch.setattr(follower, "catch_up", ended)
    thread.join(15)
    assert not thread.is_alive()
    lag = b.admin.follower_lag()
    assert lag is not None
    assert lag.stalled is not None
    assert "pml-follower" in lag.stalled


def test_a_capture_just_after_a_postgresql_crash_reaches_the_other_replica(
    own_postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """docs/storage.md, After a PostgreSQL crash. A transaction id whose rollback the WAL did
    not hold yet when PostgreSQL crashed is handed out again after crash recovery. Replica B's
    change feed had read past it (its snapshot taken after the rollback); A's first capture
    after the restart got that id, so B's feed counted it as seen and B never ranked the
    pattern (the op log still gave B its intents). B's position names the server's epoch now,
    which crash recovery empties: B reads the feed again from the start and suggests it."""
    cluster = own_postgres_cluster
    dsn = cluster.create_database()
    with psycopg.connect(cluster.dsn(), autocommit=True) as db:  # the WAL writer waits 10 s
        db.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        db.execute("SELECT pg_reload_conf()")
    clock = Clock()
    a = open_engine(tmp_path / "a", clock, store=dsn)
    b = open_engine(tmp_path / "b", clock, store=dsn)
    try:
        follower = b._state.follower
        assert follower is not None
        for attempt in range(5):  # the WAL may hold the rollback all the same: again
            with psycopg.connect(dsn, autocommit=True) as db:
                db.execute("BEGIN")
                row = db.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
                db.execute("ROLLBACK")
            assert row is not None
            _first_answer(follower.catch_up)  # B's feed is past the rolled back id
            cluster.stop("immediate")
            cluster.start()
            tools = [f"mail{attempt}.compose", f"mail{attempt}.send"]
            intent = f"Send report {attempt} by mail"
            record = make_record(f"r{attempt}", intent, tools)
            pattern_id = _first_answer(lambda: a.record("t", record).pattern_id)  # noqa: B023
            with psycopg.connect(dsn, autocommit=True) as db:
                xid = db.execute(
                    "SELECT changed_xid::text::bigint FROM pml_patterns WHERE key = %s",
                    (tenant_key("t", pattern_id),),
                ).fetchone()
            assert xid is not None
            if xid[0] <= row[0]:
                break  # A's pattern was written with an id B's feed had counted as seen
        else:
            pytest.fail("PostgreSQL handed out no rolled back id again after 5 crashes")

        def suggested() -> bool:
            follower.catch_up()
            shown = b.suggest("t", SuggestQuery(intent)).suggestions
            return pattern_id in [s.pattern.id for s in shown]

        assert _eventually(suggested)
    finally:
        a.close()
        b.close()


def test_a_replica_follows_again_soon_after_postgresql_comes_back(
    own_postgres_cluster: PostgresCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/storage.md, Replicas (Errors): the follower's back-off doubled from 0.5 s through
    a PostgreSQL outage up to 30 s, so a 5 s outage left it waiting 4 s, then 8 s, after the
    database was back. Each wait it logs ("retrying in N s") is now at most 2 s
    (`MAX_BACKOFF_SECONDS`); a capture on A after the restart is suggested by B without any
    catch-up but the follower's own."""
    cluster = own_postgres_cluster
    dsn = cluster.create_database()
    clock = Clock()
    a = open_engine(tmp_path / "a", clock, store=dsn)
    b = open_engine(tmp_path / "b", clock, store=dsn)
    try:
        caplog.set_level(logging.WARNING, logger="pml_server.replication._follower")
        cluster.stop("immediate")
        time.sleep(5)  # the outage: B's follower fails and waits, again and again
        cluster.start()
        record = make_record("r1", "Send the weekly report by mail", ["mail.compose", "mail.send"])
        pattern_id = _first_answer(lambda: a.record("t", record).pattern_id)

        def suggested() -> bool:
            shown = b.suggest("t", SuggestQuery("Send the weekly report by mail")).suggestions
            return pattern_id in [s.pattern.id for s in shown]

        assert _eventually(suggested)
        waits = [
            float(match.group(1))
            for r in caplog.records
            if (match := re.search(r"retrying in ([0-9.]+) s", r.getMessage()))
        ]
        assert len(waits) >= 6  # A's and B's followers failed in the outage, each logged its wait
        assert max(waits) <= 2.0  # MAX_BACKOFF_SECONDS, as docs/storage.md says
        # each failure's message one line, libpq's multi-line ones included (`logged_error`)
        follower_says = [r.getMessage() for r in caplog.records if r.name.endswith("_follower")]
        assert all("\n" not in message for message in follower_says)
        lag = b.admin.follower_lag()
        assert lag is not None
        assert lag.errors >= 3
        assert lag.stalled is None
    finally:
        a.close()
        b.close()
