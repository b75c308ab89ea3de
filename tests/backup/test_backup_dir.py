"""The backup root: a backup is there whole or not at all, named so that names sort by time,
pruned to the newest `keep`; a crash's partial directory is never listed and goes at the next
backup; a failed backup is counted and logged, and the job goes on."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from pml_server.api.metrics import Metrics
from pml_server.backup import (
    MANIFEST_NAME,
    STORE_ID_NAME,
    BackupDir,
    BackupJob,
    BackupStatus,
    RestoreRefusedError,
    store_id,
    verify_restored,
)


def _clock(start: datetime) -> Iterator[datetime]:
    moment = start
    while True:
        yield moment
        moment += timedelta(seconds=1)


def _copy_of(content: str) -> Callable[[Path], int]:
    def checkpoint(path: Path) -> int:
        path.mkdir()
        (path / "data").write_text(content)
        return 42

    return checkpoint


def test_backups_are_whole_named_in_time_order_and_pruned_to_keep(tmp_path: Path) -> None:
    # across a year's end, a month's end and a day's: the names still sort by time
    times = _clock(datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC))
    backups = BackupDir(tmp_path / "backups", keep=2, store_id="a", clock=lambda: next(times))
    taken = [backups.take(_copy_of(str(i)), {"about": i}) for i in range(4)]
    removed = backups.prune()
    assert removed == [taken[0].path, taken[1].path]
    assert backups.complete() == [taken[2].path, taken[3].path]
    assert [b.created_at.year for b in taken] == [2026, 2026, 2027, 2027]
    newest = taken[3]
    assert (newest.path / "data").read_text() == "3"
    manifest = json.loads((newest.path / MANIFEST_NAME).read_text())
    assert manifest == {
        "created_at": newest.created_at.isoformat(),
        "sequence": 42,
        "about": 3,
        "store_id": "a",
        # what the first open of a restored copy checks (tests/backup/test_backups_served.py)
        "files": {"data": {"bytes": 1, "sha256": hashlib.sha256(b"3").hexdigest()}},
    }
    assert newest.sequence == 42


def test_a_failed_checkpoint_leaves_nothing_and_a_crash_leftover_is_never_listed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "backups"
    backups = BackupDir(root, keep=3, store_id="a")

    def breaks_halfway(path: Path) -> int:
        path.mkdir()
        (path / "half").write_text("x")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        backups.take(breaks_halfway, {})
    assert list(root.iterdir()) == []
    # what a crash (no exception handler ran) leaves behind
    (root / ".partial-pml-backup-2026-01-01T00-00-00.000000Z").mkdir()
    (root / "pml-backup-2026-01-01T00-00-01.000000Z").mkdir()  # no manifest: not whole
    assert backups.complete() == []
    taken = backups.take(_copy_of("ok"), {})
    assert backups.complete() == [taken.path]
    assert not any(p.name.startswith(".partial-") for p in root.iterdir())


def test_two_backups_in_one_clock_reading_are_refused_not_merged(tmp_path: Path) -> None:
    moment = datetime(2026, 6, 1, tzinfo=UTC)
    backups = BackupDir(tmp_path, keep=5, store_id="a", clock=lambda: moment)
    first = backups.take(_copy_of("first"), {})
    with pytest.raises(FileExistsError):
        backups.take(_copy_of("second"), {})
    assert (first.path / "data").read_text() == "first"


def test_stores_sharing_a_backup_root_each_keep_their_own_newest(tmp_path: Path) -> None:
    # two servers (two replicas, or a test server beside production) with one --backup-dir:
    # each keeps its own newest `keep`, and never removes the other's
    root = tmp_path / "backups"
    times = _clock(datetime(2026, 3, 1, tzinfo=UTC))
    first = BackupDir(root, keep=2, store_id="a", clock=lambda: next(times))
    second = BackupDir(root, keep=2, store_id="b", clock=lambda: next(times))
    taken: dict[str, list[Path]] = {"a": [], "b": []}
    for i in range(3):
        for backups in (first, second):
            taken[backups.store_id].append(backups.take(_copy_of(str(i)), {}).path)
            backups.prune()
    assert first.own() == taken["a"][1:]
    assert second.own() == taken["b"][1:]
    assert backups.complete() == sorted(taken["a"][1:] + taken["b"][1:])
    # a backup of an earlier pml names no store: its data directory tells whose it is
    legacy = root / "pml-backup-2026-01-01T00-00-00.000000Z"
    legacy.mkdir()
    (legacy / MANIFEST_NAME).write_text(json.dumps({"data_dir": "/srv/a", "sequence": 1}))
    assert BackupDir(root, keep=2, store_id="b", data_dir="/srv/b").prune() == []
    assert BackupDir(root, keep=2, store_id="a", data_dir="/srv/a").prune() == [legacy]


def test_a_data_directory_keeps_its_store_id_and_a_copy_of_a_backup_gets_its_own(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    made = store_id(data)
    assert len(made) == 32
    assert store_id(data) == made  # after a restart too: read from the file
    assert (data / STORE_ID_NAME).read_text().strip() == made
    # a restore copies a backup, which holds the checkpoint only: a store of its own
    restored = tmp_path / "restored"
    restored.mkdir()
    assert store_id(restored) != made


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep"):
        BackupDir(tmp_path, keep=0, store_id="a")


def test_the_job_counts_failures_goes_on_and_stops_when_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failing = {"now": True}
    done = threading.Semaphore(0)

    def checkpoint(path: Path) -> int:
        try:
            if failing["now"]:
                raise OSError(13, "Permission denied")
            return _copy_of("ok")(path)
        finally:
            done.release()

    job = BackupJob(
        BackupDir(tmp_path / "b", keep=1, store_id="a"), checkpoint, {}, interval_seconds=0
    )
    stop = threading.Event()
    thread = threading.Thread(target=job.run, args=(stop,))
    thread.start()
    try:
        job.request()
        assert done.acquire(timeout=30)
        failing["now"] = False
        job.request()
        assert done.acquire(timeout=30)
    finally:
        stop.set()
        job.request()
        thread.join(30)
    assert not thread.is_alive()
    status = job.status()
    assert (status.taken, status.failed) == (1, 1)
    assert status.last_success_unix is not None
    assert any("backup failed: [Errno 13] Permission denied" in r.message for r in caplog.records)
    assert len(BackupDir(tmp_path / "b", keep=1, store_id="a").complete()) == 1


def test_a_backup_written_whose_older_ones_cannot_be_removed_is_counted_as_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The backup is whole when pruning fails: it counts as taken and as the last success
    (an alert on `pml_backup_last_success_timestamp_seconds` fired though it was written),
    and the failed prune is counted apart; the next backup removes the older ones."""
    times = _clock(datetime(2026, 12, 7, 8, 0, tzinfo=UTC))
    backups = BackupDir(tmp_path / "b", keep=1, store_id="a", clock=lambda: next(times))
    job = BackupJob(backups, _copy_of("ok"), {}, interval_seconds=0)
    job.take_one()

    def busy(path: object, *args: object, **kwargs: object) -> None:
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr("pml_server.backup._dir.shutil.rmtree", busy)
    job.take_one()
    status = job.status()
    assert (status.taken, status.failed, status.prunes_failed) == (2, 0, 1)
    assert status.last_success_unix is not None
    assert len(backups.complete()) == 2
    assert any("older backups not removed" in r.message for r in caplog.records)
    monkeypatch.undo()
    job.take_one()
    assert (job.status().taken, job.status().prunes_failed) == (3, 1)
    assert len(backups.complete()) == 1


@pytest.mark.parametrize(
    "files",
    [
        [],
        {"data": 7},
        {"data": {"bytes": "1", "sha256": "00"}},
        {"../data": {"bytes": 1, "sha256": "00"}},
    ],
)
def test_a_restored_copy_whose_manifest_lists_files_wrongly_is_refused(
    tmp_path: Path, files: object
) -> None:
    """Edited by hand or damaged: refused with one line naming the manifest, never a traceback
    (an unexpected shape raised TypeError or KeyError out of `pml serve`)."""
    backups = BackupDir(tmp_path / "backups", keep=1, store_id="a")
    copy = tmp_path / "restored"  # a backup is served as a copy (a backup itself is refused)
    shutil.copytree(backups.take(_copy_of("x"), {}).path, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    verify_restored(copy)  # whole: checked and marked
    assert not (copy / MANIFEST_NAME).exists()
    (copy / MANIFEST_NAME).write_text(json.dumps({**manifest, "files": files}))
    with pytest.raises(RestoreRefusedError, match=f"backup manifest {copy / MANIFEST_NAME}"):
        verify_restored(copy)


def test_the_metrics_show_backups_by_result_and_the_prunes_that_failed() -> None:
    metrics = Metrics()
    metrics.watch_backups(
        lambda: BackupStatus(taken=3, failed=1, last_success_unix=1.5e9, prunes_failed=2)
    )
    scraped = generate_latest(metrics.registry).decode()
    assert 'pml_backups_total{result="ok"} 3.0' in scraped
    assert 'pml_backups_total{result="failed"} 1.0' in scraped
    assert "pml_backup_prunes_failed_total 2.0" in scraped
    assert "pml_backup_last_success_timestamp_seconds 1.5e+09" in scraped


def test_a_clock_stepped_back_never_prunes_the_newest_backup(tmp_path: Path) -> None:
    # the wall clock set back (an NTP step, a clock set wrong then fixed): the backup taken
    # after it is named earlier than those before it, yet it holds the most (docs/storage.md,
    # Backups and restore: newest by the store's sequence number, not by name)
    moments = iter(
        [
            datetime(2026, 6, 1, 12, tzinfo=UTC),
            datetime(2026, 6, 1, 13, tzinfo=UTC),
            datetime(2025, 6, 1, 13, tzinfo=UTC),  # a year back
            datetime(2026, 6, 1, 11, tzinfo=UTC),  # an hour back, a year forward again
        ]
    )
    backups = BackupDir(tmp_path / "backups", keep=2, store_id="a", clock=lambda: next(moments))

    def at(sequence: int) -> Callable[[Path], int]:
        def checkpoint(path: Path) -> int:
            path.mkdir()
            (path / "data").write_text(str(sequence))
            return sequence

        return checkpoint

    first, second = backups.take(at(10), {}).path, backups.take(at(20), {}).path
    third = backups.take(at(30), {}).path
    assert backups.prune() == [first]
    assert backups.own() == [second, third]
    fourth = backups.take(at(40), {}).path
    assert backups.prune() == [second]
    assert backups.own() == [third, fourth]
    assert (fourth / "data").read_text() == "40"
