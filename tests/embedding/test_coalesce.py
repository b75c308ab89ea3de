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
