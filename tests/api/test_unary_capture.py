"""CaptureCoalescer: concurrent RecordExecution calls are captured in shared `record_many`
batches, and each caller gets exactly the answer (or the refusal) of its own record."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from pml_server.api.unary_capture import CaptureCoalescer
from pml_server.domain import model
from pml_server.domain.errors import FieldViolation, InvalidArgumentError, UnavailableError
from pml_server.domain.limits import LIMITS
from tests.support import make_record, open_engine


class GatedEngine:
    """Records every batch it is given; the first call waits for `gate`, so the calls made
    meanwhile queue behind it. A record whose intent is "bad" is refused alone."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[tuple[str, list[str]]] = []  # (tenant, request ids), in call order
        self.fail_batches = False
        self._lock = threading.Lock()

    def _wait_first(self) -> None:
        with self._lock:
            first = not self.calls
        if first:
            self.entered.set()
            assert self.gate.wait(10)

    def _one(self, record: model.ExecutionRecord) -> model.CaptureResult | Exception:
        if record.intent == "bad":
            return InvalidArgumentError(FieldViolation("intent", "bad record"))
        return model.CaptureResult(model.CaptureOutcome.SAVED, pattern_id=record.request_id)

    def record(self, tenant: str, record: model.ExecutionRecord) -> model.CaptureResult:
        self._wait_first()
        with self._lock:
            self.calls.append((tenant, [record.request_id]))
        outcome = self._one(record)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def record_many(
        self, tenant: str, records: Sequence[model.ExecutionRecord]
    ) -> list[model.CaptureResult | Exception]:
        self._wait_first()
        with self._lock:
            self.calls.append((tenant, [r.request_id for r in records]))
        if self.fail_batches:
            raise UnavailableError("not ready")
        return [self._one(r) for r in records]


def _call_all(
    coalescer: CaptureCoalescer, engine: GatedEngine, calls: list[tuple[str, str, str]]
) -> dict[str, model.CaptureResult | Exception]:
    """The first call alone, then the others while it is held at the gate; every answer."""
    answers: dict[str, model.CaptureResult | Exception] = {}

    def call(tenant: str, request_id: str, intent: str) -> None:
        record = make_record(request_id, intent, ["read_file"])
        try:
            answers[request_id] = coalescer.record(tenant, record)
        except Exception as error:
            answers[request_id] = error

    threads = [threading.Thread(target=call, args=args) for args in calls]
    threads[0].start()
    assert engine.entered.wait(10)
    for t in threads[1:]:
        t.start()
    # every later call is queued (nothing can run while the first holds the only slot)
    for _ in range(1000):
        if len(coalescer._queue) == len(calls) - 1:
            break
        threading.Event().wait(0.01)
    engine.gate.set()
    for t in threads:
        t.join(10)
    return answers


def test_calls_waiting_together_share_one_batch_and_get_their_own_answers() -> None:
    engine = GatedEngine()
    coalescer = CaptureCoalescer(engine, slots=1)  # type: ignore[arg-type]
    calls = [("t", f"r{i}", f"intent {i}") for i in range(6)]
    answers = _call_all(coalescer, engine, calls)
    assert engine.calls[0] == ("t", ["r0"])  # alone: `record` at once, nobody waited for
    assert sorted(engine.calls[1][1]) == [f"r{i}" for i in range(1, 6)]
    assert len(engine.calls) == 2
    assert coalescer.batches == 2
    for _, request_id, _ in calls:
        answer = answers[request_id]
        assert isinstance(answer, model.CaptureResult)
        assert answer.pattern_id == request_id


def test_a_refused_record_fails_its_own_call_only() -> None:
    engine = GatedEngine()
    coalescer = CaptureCoalescer(engine, slots=1)  # type: ignore[arg-type]
    answers = _call_all(
        coalescer, engine, [("t", "r0", "fine"), ("t", "r1", "bad"), ("t", "r2", "fine")]
    )
    assert len(engine.calls[1][1]) == 2  # r1 and r2 together
    assert isinstance(answers["r1"], InvalidArgumentError)
    assert isinstance(answers["r0"], model.CaptureResult)
    assert isinstance(answers["r2"], model.CaptureResult)


def test_a_batch_refused_whole_reaches_every_caller_of_it() -> None:
    engine = GatedEngine()
    engine.fail_batches = True
    coalescer = CaptureCoalescer(engine, slots=1)  # type: ignore[arg-type]
    answers = _call_all(coalescer, engine, [("t", f"r{i}", "x") for i in range(4)])
    assert isinstance(answers["r0"], model.CaptureResult)  # alone, through `record`
    assert all(isinstance(answers[f"r{i}"], UnavailableError) for i in (1, 2, 3))


def test_tenants_are_never_batched_together_and_batches_respect_the_bound() -> None:
    engine = GatedEngine()
    coalescer = CaptureCoalescer(engine, slots=1, max_batch=3)  # type: ignore[arg-type]
    calls = [("a", "a0", "x")]
    calls += [("a" if i % 2 else "b", f"q{i}", "x") for i in range(1, 9)]
    answers = _call_all(coalescer, engine, calls)
    assert all(isinstance(a, model.CaptureResult) for a in answers.values())
    tenant_of = {request_id: tenant for tenant, request_id, _ in calls}
    for tenant, request_ids in engine.calls:
        assert len(request_ids) <= 3
        assert {tenant_of[r] for r in request_ids} == {tenant}
    assert sorted(r for _, ids in engine.calls for r in ids) == sorted(tenant_of)


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="slots"):
        CaptureCoalescer(GatedEngine(), slots=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_batch"):
        CaptureCoalescer(GatedEngine(), max_batch=LIMITS.capture_batch.bound + 1)  # type: ignore[arg-type]


def test_concurrent_calls_on_the_real_engine_count_like_separate_ones(tmp_path: Path) -> None:
    """Through the real engine: 16 callers, one code, half of them resending a request id
    another caller uses. Every distinct request id is applied once (the others answer
    replayed), the pattern counts each once, and every caller gets an answer."""
    engine = open_engine(tmp_path)
    try:
        coalescer = CaptureCoalescer(engine)
        answers: list[model.CaptureResult] = []
        lock = threading.Lock()

        def call(i: int) -> None:
            record = make_record(f"req-{i % 8}", f"read the json file number {i % 8}", ["read"])
            result = coalescer.record("default", record)
            with lock:
                answers.append(result)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(answers) == 16
        assert sum(not a.replayed for a in answers) == 8
        assert len({a.pattern_id for a in answers}) == 1
        stats = engine.stats("default")
        assert stats.executions == 8
        assert stats.patterns == 1
    finally:
        engine.close()
