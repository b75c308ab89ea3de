"""`Engine.record_many`, the batch path of StreamTraces: the same outcomes and counters as the
same records captured one `record` call at a time, with duplicates, bad records and replays
inside one batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain.errors import AlreadyExistsError, InvalidArgumentError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import (
    CaptureOutcome,
    CaptureResult,
    ExecutionRecord,
    PageRequest,
    SuggestQuery,
)
from pml_server.service import Engine
from pml_server.service._state import CAPTURE_SLOTS
from tests.support import Clock, make_record, open_engine

JSON_TOOLS = ["read_file", "parse_json"]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = open_engine(tmp_path / "db")
    yield engine
    engine.close()


def _workload() -> list[ExecutionRecord]:
    """Every capture rule in one stream of records: new patterns, the same code with other
    values (counted), near-duplicate and new intents, failed tries of known and unknown
    patterns, a repeated request id, an invalid record, tags."""
    return [
        make_record("r0", "Read JSON file", JSON_TOOLS, path="a.json", tags=("io",)),
        make_record("r1", "Parse JSON from disk", JSON_TOOLS, path="b.json"),
        make_record("r2", "Read JSON file", JSON_TOOLS, path="c.json"),  # near-duplicate intent
        make_record("r3", "Write JSON file", ["write_file"]),
        make_record("r4", "Read JSON file", JSON_TOOLS, failed={"parse_json"}),  # rule 2
        make_record("r5", "Send an email", ["gmail_send"], failed={"gmail_send"}),  # rule 1
        make_record("r1", "Parse JSON from disk", JSON_TOOLS, path="b.json"),  # a retry
        make_record("r6", "", ["write_file"]),  # invalid: empty intent
        make_record("r7", "Write JSON output", ["write_file"], path="o.json", tags=("out",)),
        make_record("r8", "Convert CSV to JSON", ["read_csv", "write_file"]),
        make_record("r9", "Convert CSV to JSON", ["read_csv", "write_file"], path="z.json"),
        make_record("r3", "another intent", ["x"], code="other()"),  # reused id: refused
    ]


def _canonical(outcomes: list[CaptureResult | Exception]) -> list[tuple[object, ...]]:
    """Outcomes with pattern and capability ids replaced by their order of first appearance
    (ids are random), errors by their type and fields."""
    names: dict[str, int] = {}
    out: list[tuple[object, ...]] = []
    for o in outcomes:
        if isinstance(o, InvalidArgumentError):
            out.append(("error", tuple(v.field for v in o.violations)))
            continue
        if isinstance(o, AlreadyExistsError):
            out.append(("already exists", str(o)))
            continue
        assert isinstance(o, CaptureResult), o
        pattern = names.setdefault(o.pattern_id, len(names)) if o.pattern_id else None
        capability = names.setdefault(o.capability_id, len(names)) if o.capability_id else None
        out.append(
            (
                o.outcome,
                pattern,
                capability,
                o.new_pattern,
                o.replayed,
                o.tool_failures,
                o.tool_mismatch,
            )
        )
    return out


def _sequential(engine: Engine, records: list[ExecutionRecord]) -> list[CaptureResult | Exception]:
    outcomes: list[CaptureResult | Exception] = []
    for record in records:
        try:
            outcomes.append(engine.record("t", record))
        except (InvalidArgumentError, AlreadyExistsError) as error:
            outcomes.append(error)
    return outcomes


def _ranked(engine: Engine, query: SuggestQuery) -> list[tuple[str, float]]:
    return [
        (s.pattern.template, round(s.score.total, 6))
        for s in engine.suggest("t", query).suggestions
    ]


def _patterns(engine: Engine) -> list[tuple[object, ...]]:
    page = engine.list_patterns("t", PageRequest(page_size=100))
    return sorted(
        (p.template, p.usage_count, p.success_count, p.failure_count, p.intent_count)
        for p in page.items
    )


def _assert_same_memory(got: Engine, expected: Engine) -> None:
    """The same tenant stats, patterns and ranking for one query."""
    assert got.stats("t") == expected.stats("t")
    assert _patterns(got) == _patterns(expected)
    query = SuggestQuery(intent="Read a JSON file", k=5)
    assert _ranked(got, query) == _ranked(expected, query)


@pytest.mark.parametrize("batch_size", [1, 5, LIMITS.capture_batch.bound])
def test_a_batch_has_the_outcomes_and_counters_of_sequential_captures(
    tmp_path: Path, batch_size: int
) -> None:
    records = _workload()
    one = open_engine(tmp_path / "one", Clock())
    batched = open_engine(tmp_path / "batched", Clock())
    try:
        expected = _sequential(one, records)
        got: list[CaptureResult | Exception] = []
        for start in range(0, len(records), batch_size):
            got += batched.record_many("t", records[start : start + batch_size])
        assert _canonical(got) == _canonical(expected)
        _assert_same_memory(batched, one)
    finally:
        one.close()
        batched.close()


def test_the_same_code_twice_in_a_batch_is_saved_then_counted(engine: Engine) -> None:
    first = make_record("a", "Read JSON file", JSON_TOOLS, path="1.json")
    second = make_record("b", "Load the JSON data", JSON_TOOLS, path="2.json")
    saved, counted = engine.record_many("t", [first, second])
    assert isinstance(saved, CaptureResult)
    assert isinstance(counted, CaptureResult)
    assert saved.outcome is CaptureOutcome.SAVED
    assert saved.new_pattern
    assert counted.outcome is CaptureOutcome.COUNTED
    assert not counted.new_pattern
    assert counted.pattern_id == saved.pattern_id
    assert engine.get_pattern("t", saved.pattern_id).usage_count == 2
    assert engine.stats("t").executions == 2


def test_one_bad_record_is_refused_alone(engine: Engine) -> None:
    good = make_record("a", "Read JSON file", JSON_TOOLS)
    bad = make_record("b", "x", ["a", "", "b"])
    other = make_record("c", "Write JSON file", ["write_file"])
    outcomes = engine.record_many("t", [good, bad, other])
    assert isinstance(outcomes[1], InvalidArgumentError)
    assert [v.field for v in outcomes[1].violations] == ["tool_calls[1].tool"]
    assert [o.outcome for o in (outcomes[0], outcomes[2]) if isinstance(o, CaptureResult)] == [
        CaptureOutcome.SAVED,
        CaptureOutcome.SAVED,
    ]
    assert engine.stats("t").patterns == 2


def test_replays_inside_a_batch_and_of_an_earlier_batch_count_once(engine: Engine) -> None:
    record = make_record("same", "Read JSON file", JSON_TOOLS)
    first, again = engine.record_many("t", [record, record])
    (later,) = engine.record_many("t", [record])
    assert isinstance(first, CaptureResult)
    assert not first.replayed
    for replay in (again, later):
        assert isinstance(replay, CaptureResult)
        assert replay.replayed
        assert (replay.outcome, replay.pattern_id) == (first.outcome, first.pattern_id)
    assert engine.get_pattern("t", first.pattern_id).usage_count == 1
    assert engine.stats("t").executions == 1


def test_batched_intents_are_searchable_at_once(engine: Engine) -> None:
    records = [
        make_record(f"r{i}", f"{verb} the quarterly report", [f"tool_{i}"])
        for i, verb in enumerate(["archive", "email", "print", "translate"])
    ]
    outcomes = engine.record_many("t", records)
    found = engine.suggest("t", SuggestQuery(intent="translate the quarterly report", k=1))
    assert isinstance(outcomes[3], CaptureResult)
    assert found.suggestions[0].capability_id == outcomes[3].capability_id


def test_a_batch_larger_than_the_bound_is_refused(engine: Engine) -> None:
    records = [make_record(f"r{i}", "Read JSON file", JSON_TOOLS) for i in range(65)]
    with pytest.raises(InvalidArgumentError):
        engine.record_many("t", records)


def test_tenant_stats_stay_exact_under_concurrent_batches_captures_and_deletions(
    tmp_path: Path,
) -> None:
    """The engine keeps each tenant's stats as it last submitted them instead of re-reading
    them per capture: with batches, single captures (saved, counted, rejected, failed tries)
    and deletions racing on two tenants, the stats are the exact totals, and the store holds
    the same values (reopened)."""
    engine = open_engine(tmp_path / "db", durability="fast")
    tenants = ("t", "u")
    rounds = 6

    def records(tenant: str, worker: int, n: int) -> list[ExecutionRecord]:
        tag = f"{tenant}_{worker}_{n}"
        return [
            make_record(f"{tag}-new", f"Fetch report {tag}", [f"tool_{tag}"]),
            make_record(f"{tag}-count", "Read JSON file", JSON_TOOLS, path=f"{tag}.json"),
            make_record(f"{tag}-rej", "Send mail", [f"mail_{tag}"], failed={f"mail_{tag}"}),
            make_record(f"{tag}-try", "Read JSON file", JSON_TOOLS, failed={"parse_json"}),
        ]

    def worker(tenant: str, worker: int, batched: bool) -> None:
        for n in range(rounds):
            batch = records(tenant, worker, n)
            if batched:
                assert all(isinstance(o, CaptureResult) for o in engine.record_many(tenant, batch))
            else:
                for record in batch:
                    engine.record(tenant, record)

    threads = [
        threading.Thread(target=worker, args=(tenant, w, w % 2 == 0))
        for tenant in tenants
        for w in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Per tenant: 4 workers x rounds x (1 new pattern + 1 count + 1 rejected + 1 failed try),
    # plus the one shared JSON pattern the first count created.
    for tenant in tenants:
        doomed = next(
            p
            for p in engine.list_patterns(tenant, PageRequest(page_size=100)).items
            if p.template.startswith("const r0 = await mcp.tool_")
        )
        engine.delete_pattern(tenant, doomed.id)
    expected = {
        "executions": 4 * rounds * 3,  # saved, counted and the failed try of a known pattern
        "rejected": 4 * rounds,
        "failures_logged": 4 * rounds * 2,
        "patterns": 4 * rounds,  # one new pattern per round, the JSON one, one deleted
    }
    stats = {tenant: engine.admin.tenant_stats(tenant) for tenant in tenants}
    engine.close()
    reopened = open_engine(tmp_path / "db", durability="fast")
    for tenant in tenants:
        assert reopened.admin.tenant_stats(tenant) == stats[tenant]
        got = {name: getattr(stats[tenant], name) for name in expected}
        assert got == expected, tenant
    reopened.close()


def test_a_batch_stores_secrets_redacted_exactly_as_single_captures(tmp_path: Path) -> None:
    """The batch normalizes and redacts all its records in one core call: what it stores of
    records carrying a credential (code, intent, arguments, errors of saved, counted and
    rejected runs) is what one `record` call at a time stores, and holds no credential."""
    secret = "sk_live_0123456789abcdefABCDEF"
    code = f'const key = "{secret}";\nawait mcp.call_api({{apiKey: key}});'
    records = [
        make_record("s0", f"call the api with {secret}", ["call_api"], code=code),
        make_record("s1", f"call it again, key {secret}", ["call_api"], code=code),
        make_record("s2", "call the api", ["call_api"], code=code, failed={"call_api"}),
        make_record("s3", f"other api {secret}", ["other_api"], failed={"other_api"}),
        make_record("s4", "Read JSON file", JSON_TOOLS),  # nothing to hide
    ]
    records = [
        replace(r, tool_calls=tuple(replace(c, error=f"{c.error} {secret}") for c in r.tool_calls))
        for r in records
    ]

    def stored(engine: Engine) -> list[object]:
        patterns = engine.list_patterns("t", PageRequest(page_size=100)).items
        failures = engine.list_failures("t", PageRequest(page_size=100)).items
        return sorted(
            [(p.template, p.original_code, sorted(i.text for i in p.intents)) for p in patterns],
            key=repr,
        ) + sorted(((f.tool, f.error, f.intent) for f in failures), key=repr)

    one = open_engine(tmp_path / "one", Clock())
    batched = open_engine(tmp_path / "batched", Clock())
    try:
        expected = _sequential(one, records)
        got = batched.record_many("t", records)
        assert _canonical(got) == _canonical(expected)
        assert stored(batched) == stored(one)
        assert secret not in repr(stored(batched))
        assert "[REDACTED]" in repr(stored(batched))
    finally:
        one.close()
        batched.close()


class _GatedEmbedder:
    """The engine's embedder, its first `gated` calls held until `release` is set: the unary
    captures arriving meanwhile queue behind the busy capture slots."""

    def __init__(self, inner: Any, gated: int) -> None:
        self._inner = inner
        self._gated = gated
        self._lock = threading.Lock()
        self.held = threading.Semaphore(0)
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed(self, texts: Sequence[str]) -> Any:
        with self._lock:
            gate = self._gated > 0
            self._gated -= 1
        if gate:
            self.held.release()
            assert self.release.wait(30)
        return self._inner.embed(texts)


def test_concurrent_unary_captures_are_grouped_with_the_counters_of_sequential_ones(
    tmp_path: Path,
) -> None:
    # The first captures take every capture slot and wait in the model; the rest arrive
    # meanwhile and are captured together as `record_many` batches.
    first = [
        make_record(f"w{n}", f"Archive old logs batch {n}", [f"list_files_{n}", "zip"])
        for n in range(CAPTURE_SLOTS)
    ]
    rest = [r for r in _workload() if r.intent and r.code != "other()"]
    one = open_engine(tmp_path / "one", Clock())
    grouped = open_engine(tmp_path / "grouped", Clock())
    try:
        _sequential(one, first + rest)
        state = grouped._state
        gate = _GatedEmbedder(state.embedder, gated=len(first))
        state.embedder = gate
        outcomes: list[CaptureResult | Exception] = []

        def capture(record: ExecutionRecord) -> None:
            try:
                outcomes.append(grouped.record("t", record))
            except Exception as error:
                outcomes.append(error)

        threads = [threading.Thread(target=capture, args=(r,)) for r in first]
        for thread in threads:
            thread.start()
        for _ in first:
            assert gate.held.acquire(timeout=30)
        for record in rest:
            threads.append(threading.Thread(target=capture, args=(record,)))
            threads[-1].start()
        deadline = time.monotonic() + 30
        while sum(map(len, state.batching.groups._queues.values())) < len(rest):
            assert time.monotonic() < deadline, "the unary captures did not queue"
            time.sleep(0.005)
        gate.release.set()
        for thread in threads:
            thread.join(30)
        assert not [o for o in outcomes if isinstance(o, Exception)]
        assert len(outcomes) == len(first) + len(rest)
        assert state.batching.groups.runs < len(outcomes)  # some ran as one batch
        _assert_same_memory(grouped, one)
    finally:
        one.close()
        grouped.close()
