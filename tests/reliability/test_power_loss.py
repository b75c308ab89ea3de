"""Power loss: the store lives on `lazyfs`, which drops every byte not fsynced when the power is
cut (server and filesystem killed together). In `sync` mode no acknowledged write may be lost,
and the full post-restart checks of workload.py hold. The control run in `fast` mode (WAL not
fsynced) must lose acknowledged writes: it proves the harness can see a loss at all.

Without FUSE this fails loudly (set PML_ALLOW_NO_FUSE=1 to turn that into a visible skip): a
silent pass would claim a durability nobody checked."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import grpc
import pytest

from testing.server_process import ServerProcess
from tests.reliability import workload
from tests.reliability.power import LazyMount, fuse_problem
from tests.reliability.report import report

SYNC_CUTS = 6
CLIENTS = 4


@pytest.fixture
def mount(tmp_path: Path) -> LazyMount:
    problem = fuse_problem()
    if problem is not None:
        message = f"POWER-LOSS TEST NOT RUN: FUSE unavailable: {problem}"
        if os.environ.get("PML_ALLOW_NO_FUSE") == "1":
            pytest.skip(message)
        pytest.fail(message + " (set PML_ALLOW_NO_FUSE=1 to skip explicitly)")
    lazy = LazyMount(tmp_path / "backing", tmp_path / "mnt")
    lazy.start()
    yield lazy
    lazy.stop()


def _power_cut(server: ServerProcess, lazy: LazyMount) -> None:
    server.kill()
    lazy.cut()
    lazy.start()


@pytest.mark.slow
def test_sync_mode_loses_no_acknowledged_write_on_power_loss(
    mount: LazyMount, tmp_path: Path
) -> None:
    rng = random.Random(11)
    ledger = workload.Ledger()
    data = mount.mount / "data"
    server = ServerProcess(data, "--durability", "sync", log_path=tmp_path / "server.log")
    server.start()
    names = workload.seed(server.target, ledger, rng)
    totals = workload.interrupted_rounds(
        server,
        ledger,
        names,
        rng,
        rounds=SYNC_CUTS,
        rounds_key="power_cuts",
        clients=CLIENTS,
        pause=(0.5, 2.0),
        cut=lambda _: _power_cut(server, mount),
    )
    summary = report("power_loss_sync", totals)
    assert totals["power_cuts"] == SYNC_CUTS, summary
    assert totals["acked_found"] == totals["acked"] > SYNC_CUTS, summary


@pytest.mark.slow
def test_fast_mode_control_run_does_lose_writes(mount: LazyMount, tmp_path: Path) -> None:
    """The harness can see a loss: WAL without fsync loses acknowledged writes to a power cut."""
    ledger = workload.Ledger()
    server = ServerProcess(
        mount.mount / "data", "--durability", "fast", log_path=tmp_path / "server.log"
    )
    server.start()
    running = workload.Writers(server.target, ledger, 1, CLIENTS)
    time.sleep(1.5)
    _power_cut(server, mount)
    running.join()
    server.start()
    lost = 0
    channel, stub = workload.stub_for(server.target)
    try:
        with channel:
            for rid in sorted(ledger.acked):
                try:
                    lost += not workload.send(stub, ledger.sent[rid].record).replayed
                except grpc.RpcError as err:  # a lost seed pattern makes its failed runs rejected
                    raise AssertionError(f"resend failed: {err}") from err
    finally:
        server.kill()
    summary = report("power_loss_fast_control", {"acked": len(ledger.acked), "lost": lost})
    assert len(ledger.acked) > 0, summary
    assert lost > 0, f"the control run lost nothing: the harness cannot see a loss; {summary}"


@pytest.mark.slow
def test_page_token_secret_survives_a_power_cut(mount: LazyMount, tmp_path: Path) -> None:
    """The HMAC secret of page tokens is written at first start; a power cut right after must
    not leave an empty key file (an empty HMAC key would make every token forgeable)."""
    server = ServerProcess(
        mount.mount / "data", "--durability", "sync", log_path=tmp_path / "server.log"
    )
    server.start()
    _power_cut(server, mount)
    server.start()
    secret = (mount.mount / "data" / "page-token.key").read_bytes()
    server.kill()
    assert len(secret) == 32, f"page-token.key holds {len(secret)} bytes after a power cut"
