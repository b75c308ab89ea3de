"""CoalescingEmbedder: concurrent callers share model runs and each gets exactly its own rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from pml_server.domain.vectors import Matrix
from pml_server.embedding import CoalescingEmbedder, make_embedder


class SlowFake:
    """A deterministic 'model': a text's vector depends on the text alone; each run is slow
    enough that concurrent callers pile up behind it."""

    model_id = "fake"
    family = "fake"
    dim = 8

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.fail_on: str | None = None

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.batches.append(len(texts))
        time.sleep(0.02)
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model failed")
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts]
        return np.array(rows, dtype=np.float32)


def test_concurrent_callers_share_runs_and_get_their_own_rows() -> None:
    fake = SlowFake()
    embedder = CoalescingEmbedder(fake, max_batch=16, slots=2)
    results: dict[tuple[int, int], Matrix] = {}

    def caller(n: int) -> None:
        for i in range(10):
            texts = [f"caller {n} call {i} text {j}" for j in range(1 + (n + i) % 3)]
            results[(n, i)] = embedder.embed(texts)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    solo = SlowFake()
    for (n, i), rows in results.items():
        texts = [f"caller {n} call {i} text {j}" for j in range(1 + (n + i) % 3)]
        assert np.array_equal(rows, solo.embed(texts))
    assert sum(fake.batches) == sum(len(r) for r in results.values())
    assert len(fake.batches) < 80  # fewer model runs than calls
    assert max(fake.batches) <= 16
    assert embedder.runs == len(fake.batches)


def test_a_failed_run_fails_every_caller_in_it_and_nothing_else() -> None:
    fake = SlowFake()
    fake.fail_on = "poison"
    embedder = CoalescingEmbedder(fake, max_batch=1, slots=1)
    with pytest.raises(RuntimeError, match="model failed"):
        embedder.embed(["poison"])
    assert embedder.embed(["fine"]).shape == (1, 8)
    assert embedder.embed([]).shape == (0, 8)


def test_minilm_rows_do_not_depend_on_their_batch_neighbours() -> None:
    model = make_embedder("minilm", cache_size=0)
    alone = model.embed(["Load a JSON file"])[0]
    inner = CoalescingEmbedder(model, max_batch=8)
    together = inner.embed(["Load a JSON file", "send the weekly report to my manager by email"])
    assert np.array_equal(alone, together[0])


def test_callers_are_woken_only_for_their_rows_or_a_free_slot() -> None:
    """Each caller waits on its own condition: no caller is woken to find nothing to do (one
    shared condition woke every waiting caller at the end of every run)."""
    fake = SlowFake()
    embedder = CoalescingEmbedder(fake, max_batch=4, slots=2)
    results: dict[tuple[int, int], Matrix] = {}

    def caller(n: int) -> None:
        for i in range(6):
            results[(n, i)] = embedder.embed([f"caller {n} call {i}"])

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 48
    assert embedder.idle_wakeups == 0
    assert len(fake.batches) < 48  # callers still shared runs
    solo = SlowFake()
    for (n, i), rows in results.items():
        assert np.array_equal(rows, solo.embed([f"caller {n} call {i}"]))


def test_oversized_requests_failures_and_many_callers_never_hang_or_mix_rows() -> None:
    """Sixteen callers, requests larger than a batch among them, some runs failing: every call
    returns its own rows or its batch's error, every slot comes back (the embedder still
    serves afterwards), and the model saw each text exactly once."""
    fake = SlowFake()
    fake.fail_on = "poison"
    embedder = CoalescingEmbedder(fake, max_batch=3, slots=2)
    outcomes: dict[tuple[int, int], Matrix | str] = {}

    def texts_of(n: int, i: int) -> list[str]:
        texts = [f"c{n} i{i} t{j}" for j in range(1 + (n * 7 + i) % 5)]  # 1 to 5 texts
        return [*texts, "poison"] if (n, i) in {(3, 1), (11, 2)} else texts

    def caller(n: int) -> None:
        for i in range(4):
            try:
                outcomes[(n, i)] = embedder.embed(texts_of(n, i))
            except RuntimeError as error:
                outcomes[(n, i)] = str(error)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    solo = SlowFake()
    for (n, i), outcome in outcomes.items():
        if isinstance(outcome, str):
            assert outcome == "model failed"
        else:
            assert np.array_equal(outcome, solo.embed(texts_of(n, i)))
    assert isinstance(outcomes[(3, 1)], str)
    assert isinstance(outcomes[(11, 2)], str)
    assert len(outcomes) == 64
    assert sum(fake.batches) == sum(len(texts_of(n, i)) for n, i in outcomes)
    assert embedder.idle_wakeups == 0
    assert embedder.embed(["after"]).shape == (1, 8)  # both slots came back
