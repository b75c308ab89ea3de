"""Backups of a running `pml serve` (a real process, RocksDB on disk): SIGUSR2 takes one while
writers go on, a copy of it serves every write acknowledged before the signal, the schedule
takes them on its own and keeps the newest `--backup-keep`; without `--backup-dir`, SIGUSR2
is logged and the server serves on; a copy with a damaged file is refused, naming it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pml_server.backup import MANIFEST_NAME, RESTORED_NAME, STORE_ID_NAME, BackupDir
from pml_server.client import ExecutionRecord, PmlClient, PmlClientError, make_record
from testing.server_process import ServerProcess


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.05)


def _pid(process: ServerProcess) -> int:
    assert process.proc is not None
    return process.proc.pid


def test_sigusr2_backup_under_writes_serves_every_write_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "backups"
    process = ServerProcess(tmp_path / "data", "--backup-dir", str(root), "--backup-keep", "2")
    process.start()
    acknowledged: list[str] = []
    stop = threading.Event()
    errors: list[Exception] = []

    def writer() -> None:
        with PmlClient(process.target, timeout=30) as client:
            i = 0
            while not stop.is_set():
                try:
                    result = client.record(
                        make_record(f"task {i}", f"await mcp.t{i % 50}({i})", tools=[f"t{i % 50}"])
                    )
                except PmlClientError as err:
                    errors.append(err)
                    return
                acknowledged.append(result.pattern)
                i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        _wait_for(lambda: len(acknowledged) >= 200, "200 acknowledged captures")
        before = len(acknowledged)
        os.kill(_pid(process), signal.SIGUSR2)
        _wait_for(lambda: BackupDir(root, keep=2, store_id="lister").complete(), "backup")
        _wait_for(lambda: len(acknowledged) >= before + 50, "captures after the backup")
    finally:
        stop.set()
        thread.join(60)
        process.terminate()
    assert errors == []
    [backup] = BackupDir(root, keep=2, store_id="lister").complete()
    manifest = json.loads((backup / MANIFEST_NAME).read_text())
    assert manifest["store_id"] == (tmp_path / "data" / STORE_ID_NAME).read_text().strip()

    restored = tmp_path / "restored"
    shutil.copytree(backup, restored)
    served = ServerProcess(restored)
    served.start()
    try:
        with PmlClient(served.target, timeout=30) as client:
            for pattern in acknowledged[:before]:
                assert client.get_pattern(pattern).usage_count >= 1
            executions = int(client.stats().executions)
            assert before <= executions < len(acknowledged)
            assert client.suggest("task 7").suggestions
    finally:
        served.terminate()


def test_scheduled_backups_keep_the_newest_and_sigusr2_never_stops_a_server(
    tmp_path: Path,
) -> None:
    root = tmp_path / "backups"
    scheduled = ServerProcess(
        tmp_path / "data",
        *("--backup-dir", str(root), "--backup-interval-seconds", "0.2", "--backup-keep", "2"),
    )
    scheduled.start()
    try:
        backups = BackupDir(root, keep=2, store_id="lister")
        seen: set[Path] = set()

        def three_taken() -> bool:
            complete = backups.complete()
            # a new backup is renamed into place before the oldest goes: never fewer than 2
            assert len(complete) <= 3
            seen.update(complete)
            return len(seen) >= 3

        _wait_for(three_taken, "three scheduled backups")
    finally:
        scheduled.terminate()
    assert len(backups.complete()) == 2

    plain = ServerProcess(tmp_path / "plain")
    plain.start()
    try:
        os.kill(_pid(plain), signal.SIGUSR2)
        _wait_for(lambda: "no backup taken" in plain.log_tail(), "warning in the log")
        with PmlClient(plain.target, timeout=30) as client:
            client.record(make_record("after the signal", "await mcp.x()", tools=["x"]))
    finally:
        assert plain.terminate() == 0


def _backup_of_captures(tmp_path: Path, count: int) -> Path:
    root = tmp_path / "backups"
    process = ServerProcess(tmp_path / "data", "--backup-dir", str(root))
    process.start()
    try:
        with PmlClient(process.target, timeout=30) as client:
            for i in range(count):
                client.record(make_record(f"task {i}", f"await mcp.t{i}()", tools=[f"t{i}"]))
        os.kill(_pid(process), signal.SIGUSR2)
        _wait_for(lambda: BackupDir(root, keep=1, store_id="lister").complete(), "backup")
    finally:
        process.terminate()
    [backup] = BackupDir(root, keep=1, store_id="lister").complete()
    return backup


def _serve_refused(data_dir: Path) -> str:
    """`pml serve` on `data_dir`: its one-line error (the test fails if it serves)."""
    args = [sys.executable, "-m", "pml_server.cli", "serve", "--data-dir", str(data_dir)]
    args += ["--embedder", "hashing", "--listen", "127.0.0.1:0"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as served:
        raise AssertionError(f"served {data_dir} instead of refusing it") from served
    assert done.returncode == 2, done.stderr
    return done.stderr.strip()


def test_a_restored_copy_with_a_damaged_file_is_refused_naming_it(tmp_path: Path) -> None:
    # RocksDB opened a copy whose MANIFEST was cut short as an empty store (no error), deleted
    # the table files the cut MANIFEST no longer named, and pml served it: every capture gone
    backup = _backup_of_captures(tmp_path, 40)
    cut = tmp_path / "cut"
    shutil.copytree(backup, cut)
    [rocks_manifest] = cut.glob("MANIFEST-*")
    whole = rocks_manifest.read_bytes()
    rocks_manifest.write_bytes(whole[: len(whole) // 2])
    files = {path.name for path in cut.iterdir()}
    error = _serve_refused(cut)
    assert error.startswith("pml serve: error: backup file")
    assert f"{rocks_manifest} has {len(whole) // 2} bytes, the backup wrote {len(whole)}" in error
    # RocksDB never opened it: every file is still there, the MANIFEST as it was
    assert files <= {path.name for path in cut.iterdir()}
    assert rocks_manifest.read_bytes() == whole[: len(whole) // 2]

    flipped = tmp_path / "flipped"
    shutil.copytree(backup, flipped)
    table = max(flipped.glob("*.sst"), key=lambda path: path.stat().st_size)
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0xFF
    table.write_bytes(bytes(data))
    assert f"{table} has other bytes than the backup wrote" in _serve_refused(flipped)

    restored = tmp_path / "restored"
    shutil.copytree(backup, restored)
    for start in range(2):  # checked once, then served as any data directory
        served = ServerProcess(restored)
        served.start()
        try:
            with PmlClient(served.target, timeout=30) as client:
                assert client.stats().executions == 40 + start
                client.record(make_record(f"after {start}", "await mcp.y()", tools=["y"]))
        finally:
            assert served.terminate() == 0
        assert not (restored / MANIFEST_NAME).exists()
        assert (restored / RESTORED_NAME).is_file()


def test_a_backup_copied_over_a_store_is_refused_not_mixed_with_it(tmp_path: Path) -> None:
    # copied over a store that had crashed, the backup was served and the store's 20 captures
    # (in its WAL, which RocksDB dropped) were gone without a word
    backup = _backup_of_captures(tmp_path, 10)
    live = ServerProcess(tmp_path / "live")
    live.start()
    with PmlClient(live.target, timeout=30) as client:
        for i in range(20):
            client.record(make_record(f"live {i}", f"await mcp.l{i}()", tools=[f"l{i}"]))
    live.kill()
    subprocess.run(["cp", "-a", f"{backup}/.", str(tmp_path / "live")], check=True)
    error = _serve_refused(tmp_path / "live")
    assert "held a store before the backup was copied into it" in error
    assert "IDENTITY" in error
    assert (tmp_path / "live" / MANIFEST_NAME).is_file()  # refused, not marked as checked


def test_a_backup_copied_into_a_data_directory_is_refused_not_served_empty(
    tmp_path: Path,
) -> None:
    # `cp -a BACKUP restored` into an existing `restored` nests the backup: the server made a
    # new empty store beside it and served that, 0 of 10 captures, without a word
    backup = _backup_of_captures(tmp_path, 10)
    restored = tmp_path / "restored"
    restored.mkdir()
    subprocess.run(["cp", "-a", str(backup), str(restored)], check=True)
    error = _serve_refused(restored)
    assert f"{restored / backup.name} is a backup copied into the data directory" in error
    assert not (restored / "CURRENT").exists()  # no store made there


def test_a_backup_under_4_writers_of_shared_patterns_keeps_counters_exact(tmp_path: Path) -> None:
    """Four clients count the same 5 patterns (successes and failures) while SIGUSR2 takes a
    backup: the restored copy answers every capture acknowledged before the signal as a
    replay, and its counters agree with its executions (each capture is one atomic batch)."""
    root = tmp_path / "backups"
    process = ServerProcess(tmp_path / "data", "--backup-dir", str(root))
    process.start()
    acknowledged: list[tuple[float, str]] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[Exception] = []

    def record_of(request_id: str, i: int) -> ExecutionRecord:
        # every third run of a pattern fails its tool
        tool, fails = f"s{i % 5}", i % 3 == 0
        return make_record(
            f"shared task {i % 5}",
            f"await mcp.{tool}()",
            tools=[] if fails else [tool],
            failed_tools=[(tool, "boom")] if fails else [],
            request_id=request_id,
        )

    def writer(k: int) -> None:
        with PmlClient(process.target, timeout=30) as client:
            i = 0
            while not stop.is_set():
                request_id = f"w{k}-{i}"
                try:
                    client.record(record_of(request_id, i))
                except PmlClientError as err:
                    errors.append(err)
                    return
                with lock:
                    acknowledged.append((time.monotonic(), request_id))
                i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    try:
        _wait_for(lambda: len(acknowledged) >= 300, "300 acknowledged captures")
        signalled = time.monotonic()
        os.kill(_pid(process), signal.SIGUSR2)
        _wait_for(lambda: BackupDir(root, keep=1, store_id="lister").complete(), "backup")
        _wait_for(lambda: len(acknowledged) >= 400, "captures after the backup")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        process.terminate()
    assert errors == []
    before = [request_id for at, request_id in acknowledged if at < signalled]
    [backup] = BackupDir(root, keep=1, store_id="lister").complete()
    restored = tmp_path / "restored"
    shutil.copytree(backup, restored)
    served = ServerProcess(restored)
    served.start()
    try:
        with PmlClient(served.target, timeout=30) as client:
            executions = client.stats().executions
            patterns = list(client.iter_patterns())
            assert sum(p.usage_count for p in patterns) == executions
            for pattern in patterns:
                assert pattern.success_count + pattern.failure_count == pattern.usage_count
            for request_id in before:
                i = int(request_id.split("-")[1])
                assert client.record(record_of(request_id, i)).replayed, request_id
            assert client.stats().executions == executions  # replays count nothing
    finally:
        served.terminate()


def test_a_restored_copy_refused_at_start_is_left_as_it_was(tmp_path: Path) -> None:
    """`pml serve` on a copy of a backup that fails its check stops naming it, and writes
    nothing into it: the page-token secret was created there before the check."""
    copy = tmp_path / "restored"
    copy.mkdir()
    (copy / MANIFEST_NAME).write_text("{cut")
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "pml"),
            *("serve", "--listen", "127.0.0.1:0", "--data-dir", str(copy)),
            *("--embedder", "hashing"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"pml serve: error: backup manifest {copy / MANIFEST_NAME}")
    assert sorted(p.name for p in copy.iterdir()) == [MANIFEST_NAME]


def test_serving_a_backup_itself_is_refused_and_leaves_it_a_backup(tmp_path: Path) -> None:
    # `pml serve --data-dir BACKUP_DIR/pml-backup-...` served the backup in place: its
    # manifest renamed (no longer listed, restorable or pruned) and its files written
    backup = _backup_of_captures(tmp_path, 10)
    files = {path.name: path.stat().st_size for path in backup.iterdir()}
    error = _serve_refused(backup)
    assert error.startswith(f"pml serve: error: --data-dir {backup} is a backup")
    assert "cp -a" in error
    assert "\n" not in error
    assert {path.name: path.stat().st_size for path in backup.iterdir()} == files
    assert BackupDir(backup.parent, keep=1, store_id="lister").complete() == [backup]
