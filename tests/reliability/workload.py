"""The write workload of the crash and power-loss tests, and the checks run after each restart.

Several client threads record executions of a few known patterns (each with its own tools, so
no two patterns share a capability) over their own channels until the server dies. The ledger
remembers every request id sent and which were acknowledged. After a restart:

1. every acknowledged request id is present (resending it answers `replayed`);
2. the requests in flight at the kill are resent: each applies at most once, so afterwards
   every counter equals the operations sent, exactly;
3. the vector index agrees with the store: each stored intent of the checked patterns is found
   by Suggest with a semantic score of 1 (its own vector), and deleted patterns are never found.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import pytest

from pml_server._core import HNSW_SCORE_ERROR
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.embedding import make_embedder
from testing.ranking_oracle import pattern_semantic
from testing.server_process import ServerProcess

_EMBEDDER = make_embedder("hashing")  # what testing/server_process.py serves with

PATTERNS = 6
_VERBS = ["read", "parse", "load", "fetch", "sync", "merge", "index", "export", "scan", "sort"]
_NOUNS = ["invoice", "ledger", "report", "backlog", "roster", "catalog", "archive", "manifest"]


def tools_of(pattern: int) -> list[str]:
    return [f"tool{pattern}_open", f"tool{pattern}_apply"]


def record(
    pattern: int, intent: str, request_id: str, failed: bool, rng: random.Random
) -> resources_pb2.ExecutionRecord:
    tools = tools_of(pattern) if pattern >= 0 else [f"doomed{-pattern}_tool"]
    path = f"/data/{rng.randrange(10_000)}.json"
    code = "\n".join(
        f'const r{i} = await mcp.{t}({{path: "{path}"}});' for i, t in enumerate(tools)
    )
    calls = [
        resources_pb2.ToolCall(
            tool=t,
            arguments_json=f'{{"path": "{path}"}}',
            ok=not (failed and i == len(tools) - 1),
            error="timeout after 30s" if failed and i == len(tools) - 1 else "",
        )
        for i, t in enumerate(tools)
    ]
    status = (
        resources_pb2.EXECUTION_STATUS_FAILURE if failed else resources_pb2.EXECUTION_STATUS_SUCCESS
    )
    return resources_pb2.ExecutionRecord(
        request_id=request_id,
        intent=intent,
        code=code,
        language="javascript",
        tool_calls=calls,
        status=status,
        duration_ms=5.0,
    )


def intent_text(pattern: int, rng: random.Random) -> str:
    """Mostly one of a few intents per pattern (bumped mappings), sometimes a fresh one (a new
    vector in the index)."""
    noun = _NOUNS[pattern % len(_NOUNS)]
    if rng.random() < 0.7:
        return f"{_VERBS[rng.randrange(3)]} the {noun} p{pattern}"
    return f"{rng.choice(_VERBS)} {noun} p{pattern} batch {uuid.uuid4().hex[:10]}"


@dataclass
class Sent:
    pattern: int
    failed: bool
    record: resources_pb2.ExecutionRecord


@dataclass
class Ledger:
    sent: dict[str, Sent] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    deleted: dict[str, str] = field(default_factory=dict)  # pattern name -> its intent text
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expected(self, pattern: int) -> tuple[int, int]:
        """(successes, failures) sent for `pattern`: its counters once everything is applied."""
        ok = sum(1 for s in self.sent.values() if s.pattern == pattern and not s.failed)
        bad = sum(1 for s in self.sent.values() if s.pattern == pattern and s.failed)
        return ok, bad


def stub_for(target: str) -> tuple[grpc.Channel, pml_pb2_grpc.PmlServiceStub]:
    channel = grpc.insecure_channel(target)
    return channel, pml_pb2_grpc.PmlServiceStub(channel)


def send(
    stub: pml_pb2_grpc.PmlServiceStub, rec: resources_pb2.ExecutionRecord
) -> resources_pb2.CaptureResult:
    return stub.RecordExecution(pml_pb2.RecordExecutionRequest(record=rec), timeout=30).result


def seed(target: str, ledger: Ledger, rng: random.Random) -> dict[int, str]:
    """One successful run per pattern, so later failed runs count as tries; returns the names."""
    names: dict[int, str] = {}
    channel, stub = stub_for(target)
    with channel:
        for p in range(PATTERNS):
            rid = f"seed-{p}"
            rec = record(p, intent_text(p, rng), rid, False, rng)
            ledger.sent[rid] = Sent(p, False, rec)
            names[p] = send(stub, rec).pattern
            ledger.acked.add(rid)
    return names


def doom_one(target: str, ledger: Ledger, cycle: int) -> None:
    """A pattern recorded then deleted (both acknowledged): it must never be found again."""
    channel, stub = stub_for(target)
    with channel:
        text = f"obliterate quarantine zeta{cycle} xylophone"
        rec = record(-cycle - 1, text, f"doomed-{cycle}", False, random.Random(cycle))
        name = send(stub, rec).pattern
        stub.DeletePattern(pml_pb2.DeletePatternRequest(name=name), timeout=30)
        ledger.deleted[name] = text


def writer(target: str, ledger: Ledger, seed_value: int, stop: threading.Event) -> None:
    """Record until the server dies (or `stop`): every request is in the ledger before it is
    sent, and marked acknowledged only after the server answered OK."""
    rng = random.Random(seed_value)
    channel, stub = stub_for(target)
    with channel:
        while not stop.is_set():
            p = rng.randrange(PATTERNS)
            failed = rng.random() < 0.2
            rid = f"w{seed_value}-{uuid.uuid4().hex}"
            rec = record(p, intent_text(p, rng), rid, failed, rng)
            with ledger.lock:
                ledger.sent[rid] = Sent(p, failed, rec)
            try:
                send(stub, rec)
            except grpc.RpcError:
                return  # the server is gone: this one is in flight, resent after restart
            with ledger.lock:
                ledger.acked.add(rid)


class Writers:
    """`clients` writer threads running until `join` (or the server dies)."""

    def __init__(self, target: str, ledger: Ledger, seed: int, clients: int) -> None:
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=writer, args=(target, ledger, seed * 100 + i, self.stop))
            for i in range(clients)
        ]
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


@dataclass
class CheckFigures:
    acked_present: int = 0
    in_flight_resent: int = 0
    intents_checked: int = 0
    deleted_checked: int = 0


def check_after_restart(
    target: str,
    ledger: Ledger,
    names: dict[int, str],
    acked_to_check: set[str],
    rng: random.Random,
    max_intents: int = 40,
) -> CheckFigures:
    """Runs the three checks of the module docstring; raises AssertionError naming the loss."""
    figures = CheckFigures()
    channel, stub = stub_for(target)
    with channel:
        for rid in sorted(acked_to_check):
            result = send(stub, ledger.sent[rid].record)
            assert result.replayed, f"acknowledged request {rid} was lost (it applied again)"
            figures.acked_present += 1
        for rid in sorted(set(ledger.sent) - ledger.acked):
            send(stub, ledger.sent[rid].record)  # applies now, or replays if it had landed
            ledger.acked.add(rid)
            figures.in_flight_resent += 1
        executions = 0
        intents: list[tuple[str, str]] = []
        texts_of: dict[str, list[str]] = {}
        for p, name in names.items():
            pattern = stub.GetPattern(pml_pb2.GetPatternRequest(name=name), timeout=30).pattern
            ok, bad = ledger.expected(p)
            got = (pattern.usage_count, pattern.success_count, pattern.failure_count)
            assert got == (ok + bad, ok, bad), f"pattern {p} counters {got} != sent {ok}, {bad}"
            executions += ok + bad
            texts_of[name] = _every_intent(stub, name)  # GetPattern shows the most hit only
            assert len(texts_of[name]) == pattern.intent_count, name
            intents += [(name, text) for text in texts_of[name]]
        doomed_runs = len(ledger.deleted)
        stats = stub.GetStats(pml_pb2.GetStatsRequest(), timeout=30)
        assert stats.executions == executions + doomed_runs, (
            f"stats.executions {stats.executions} != {executions} + {doomed_runs} sent"
        )
        for name, text in rng.sample(intents, min(max_intents, len(intents))):
            found = _suggested(stub, text)
            # the pattern's semantic part over its intents' cosines, the asked one exactly 1:
            # what Suggest reports only if every intent of the pattern is in the vector index
            # (within the index's half-precision error; a missing intent moves it by far more)
            expected = _semantic_of(text, texts_of[name])
            assert found.get(name, 0.0) == pytest.approx(expected, abs=HNSW_SCORE_ERROR), (
                f"intent {text!r} of {name} not in the index"
            )
            figures.intents_checked += 1
        for name, text in ledger.deleted.items():
            assert name not in _suggested(stub, text), f"deleted {name} is still suggested"
            figures.deleted_checked += 1
    return figures


def _semantic_of(text: str, pattern_texts: list[str]) -> float:
    """The semantic part Suggest gives a pattern for `text` (the server's hashing embedder)."""
    vectors = _EMBEDDER.embed([text, *pattern_texts])
    return pattern_semantic(float(vectors[0] @ row) for row in vectors[1:])


def _every_intent(stub: pml_pb2_grpc.PmlServiceStub, name: str) -> list[str]:
    """The texts of every intent of the pattern `name`, paged through (ListPatternIntents)."""
    texts: list[str] = []
    token = ""
    while True:
        page = stub.ListPatternIntents(
            pml_pb2.ListPatternIntentsRequest(parent=name, page_size=1000, page_token=token),
            timeout=30,
        )
        texts += [i.text for i in page.intents]
        if not (token := page.next_page_token):
            return texts


def _suggested(stub: pml_pb2_grpc.PmlServiceStub, text: str) -> dict[str, float]:
    """Pattern name -> semantic score of every candidate Suggest saw (kept or filtered)."""
    reply = stub.Suggest(
        pml_pb2.SuggestRequest(intent=text, page_size=20, explain=True, include_flagged=True),
        timeout=30,
    )
    found = {s.pattern.name: s.score.semantic for s in reply.suggestions}
    for f in reply.filtered:
        found.setdefault(f.pattern, f.score.semantic)
    return found


def interrupted_rounds(
    server: ServerProcess,
    ledger: Ledger,
    names: dict[int, str],
    rng: random.Random,
    *,
    rounds: int,
    rounds_key: str,
    clients: int,
    pause: tuple[float, float],
    cut: Callable[[int], None],
) -> dict[str, int]:
    """`rounds` times over a seeded server: a pattern doomed, `clients` writers recording for a
    pause drawn from `pause`, `cut(round)` stops the server while they write (it may change
    `server.flags` for the restart), the writers stopped, the server started again and
    `check_after_restart` run over what the round acknowledged. The figures summed, the rounds
    run counted under `rounds_key`; the server is killed at the end, whatever happens."""
    totals = {rounds_key: 0, "acked": 0, "acked_found": 0, "in_flight_resent": 0}
    totals |= {"intents_checked": 0, "deleted_checked": 0}
    try:
        for n in range(rounds):
            doom_one(server.target, ledger, n)
            acked_before = set(ledger.acked)
            writers = Writers(server.target, ledger, n, clients)
            time.sleep(rng.uniform(*pause))
            cut(n)
            writers.join()
            server.start()
            new_acked = ledger.acked - acked_before
            figures = check_after_restart(server.target, ledger, names, new_acked, rng)
            totals[rounds_key] += 1
            totals["acked"] += len(new_acked)
            totals["acked_found"] += figures.acked_present
            totals["in_flight_resent"] += figures.in_flight_resent
            totals["intents_checked"] += figures.intents_checked
            totals["deleted_checked"] = figures.deleted_checked  # every round checks them all
    finally:
        server.kill()
    return totals
