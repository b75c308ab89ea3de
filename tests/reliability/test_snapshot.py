"""Vector index snapshots: corrupted snapshot bytes and kills while a snapshot is written must
always restart to a correct index (corruption detected and the index rebuilt from the store,
never served corrupt).

"Correct" is checked against the store itself: the restored index holds exactly the stored
intents (no more, no fewer: deleted ones are gone) and each intent's own vector finds it first."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from pml_server.domain.records import IntentRecord
from pml_server.service import Engine
from pml_server.storage import Store
from pml_server.storage.repo import Repository
from testing.server_process import ServerProcess
from tests.reliability import workload
from tests.reliability.report import report
from tests.support import make_record, open_engine

TENANT = "t"


def _fill(path: Path, kind: str) -> None:
    """Six patterns with several intents each; one pattern deleted."""
    engine = open_engine(path, vector_index=kind)
    verbs = ["read", "parse", "load", "store", "index", "merge", "scan"]
    names = []
    for p in range(6):
        for v, verb in enumerate(verbs):
            result = engine.record(
                TENANT, make_record(f"{p}-{v}", f"{verb} the item{p} catalog zone{v}", [f"tool{p}"])
            )
        names.append(result.pattern_id)
    engine.delete_pattern(TENANT, names[0])
    engine.close()


def _assert_index_matches_store(engine: Engine) -> int:
    """The served index equals the store's intents; returns how many were checked."""
    stored = [
        IntentRecord.from_json(r) for r in engine._state.repo.intents.tenant_stored_intents(TENANT)
    ]
    index = engine._state.indexes.for_tenant(TENANT)
    assert index.vector_count() == len(stored), "index size differs from the stored intents"
    for intent in stored:
        assert index.ann.contains(intent.id), f"intent {intent.id} missing from the index"
        [(found, score)] = index.semantic(intent.vector, 1)
        assert found == intent.id, f"intent {intent.id}: its own vector finds {found} first"
        assert score > 0.999, f"intent {intent.id}: self-similarity {score}"
    return len(stored)


def _corruptions(data: bytes, rng: random.Random) -> dict[str, bytes]:
    out: dict[str, bytes] = {"empty": b"", "garbage": rng.randbytes(len(data))}
    for n in (1, 8, len(data) // 2, len(data) - 1):
        out[f"truncated to {n}"] = data[:n]
    out["one byte appended"] = data + b"\0"
    for i in range(20):
        flipped = bytearray(data)
        pos = rng.randrange(len(data))
        flipped[pos] ^= 1 << rng.randrange(8)
        out[f"bit flip {i} at {pos}"] = bytes(flipped)
    return out


@pytest.mark.parametrize("kind", ["hnsw", "exact"])
def test_corrupted_snapshot_is_detected_and_rebuilt(tmp_path: Path, kind: str) -> None:
    _fill(tmp_path, kind)
    store = Store(tmp_path, "fast")
    snapshot = Repository(store).meta.snapshot(TENANT)
    store.close()
    assert snapshot is not None, "no snapshot was written at close"
    seq, original = snapshot
    tried = checked = 0
    for name, corrupted in _corruptions(original, random.Random(kind)).items():
        store = Store(tmp_path, "fast")
        store.write([Repository(store).meta.put_snapshot(TENANT, seq, corrupted)])
        store.close()
        try:
            engine = open_engine(tmp_path, vector_index=kind)
        except Exception as err:
            raise AssertionError(
                f"{kind}: snapshot '{name}' made the index fail to load: "
                f"{type(err).__name__}: {err}"
            ) from err
        try:
            checked += _assert_index_matches_store(engine)
        finally:
            engine.close()
        tried += 1
    summary = report(
        f"snapshot_corruption_{kind}", {"corruptions": tried, "intents_verified": checked}
    )
    assert tried >= 25, summary


@pytest.mark.slow
def test_kills_while_snapshots_are_written_restart_correct(tmp_path: Path) -> None:
    """Snapshots every 20 ms while four clients write; SIGKILL at random moments, and SIGKILL
    shortly after SIGTERM (inside the close-time snapshot)."""
    rng = random.Random(5)
    ledger = workload.Ledger()
    flags = ("--durability", "sync", "--snapshot-interval-seconds", "0.02")
    server = ServerProcess(tmp_path / "data", *flags)
    server.start()
    names = workload.seed(server.target, ledger, rng)
    totals = {
        "kills": 0,
        "kills_during_close": 0,
        "acked": 0,
        "acked_found": 0,
        "intents_checked": 0,
    }
    try:
        for cycle in range(8):
            workload.doom_one(server.target, ledger, cycle)
            acked_before = set(ledger.acked)
            writers = workload.Writers(server.target, ledger, cycle, 4)
            time.sleep(rng.uniform(0.2, 1.0))
            if cycle % 2:
                assert server.proc is not None
                server.proc.terminate()
                time.sleep(rng.uniform(0.0, 0.05))
                totals["kills_during_close"] += 1
            server.kill()
            writers.join()
            server.start()
            new_acked = ledger.acked - acked_before
            figures = workload.check_after_restart(server.target, ledger, names, new_acked, rng)
            totals["kills"] += 1
            totals["acked"] += len(new_acked)
            totals["acked_found"] += figures.acked_present
            totals["intents_checked"] += figures.intents_checked
    finally:
        server.kill()
    summary = report("snapshot_kills", totals)
    assert totals["acked_found"] == totals["acked"], summary
