"""MiniLM's model workers: every caller's texts go to one queue served by `workers` threads, so
concurrent callers each get exactly their one-text vectors, never more texts run at once than
there are workers, a failed text fails its own call alone, and the workers stop once the
embedder is gone."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import numpy.typing as npt
import pytest

from pml_server.domain.vectors import Matrix
from pml_server.embedding.minilm import MiniLMEmbedder

pytestmark = pytest.mark.model  # every test here runs a real embedding model

TEXTS = [
    "Read JSON file",
    "I want to know the latest news about Tesla and how it has impacted the stock market.",
    "Convert 5 USD to EUR",
    "Find me a flight from Boston to Denver next Tuesday morning, then book a hotel near the "
    "airport for two nights and send the confirmation to my assistant by email.",
    "Get the exchange rate, multiply by five and store the result in the finance sheet.",
    "word " * 300,
]


@pytest.fixture(scope="module")
def model() -> MiniLMEmbedder:
    return MiniLMEmbedder(workers=2)


def _callers(model: MiniLMEmbedder, calls: int) -> dict[tuple[int, int], Matrix]:
    """8 threads, each making `calls` calls of 1 to 3 texts."""
    results: dict[tuple[int, int], Matrix] = {}

    def caller(n: int) -> None:
        for i in range(calls):
            texts = [TEXTS[(n + i + j) % len(TEXTS)] for j in range(1 + (n + i) % 3)]
            results[(n, i)] = model.embed(texts)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_callers_each_get_their_one_text_vectors(model: MiniLMEmbedder) -> None:
    alone = {t: model.embed([t])[0] for t in TEXTS}
    results = _callers(model, 4)
    assert len(results) == 32
    for (n, i), rows in results.items():
        texts = [TEXTS[(n + i + j) % len(TEXTS)] for j in range(1 + (n + i) % 3)]
        assert rows.shape == (len(texts), 384)
        for text, row in zip(texts, rows, strict=True):
            assert np.array_equal(row, alone[text])


def test_no_more_texts_run_at_once_than_there_are_workers(
    model: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    run_one = MiniLMEmbedder._run_one

    def counted(self: MiniLMEmbedder, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            time.sleep(0.002)  # long enough that the callers pile up
            return run_one(self, ids)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(MiniLMEmbedder, "_run_one", counted)
    _callers(model, 3)
    assert most == 2  # both workers busy, never a third text


def test_a_failed_text_fails_its_own_call_alone(
    model: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_one = MiniLMEmbedder._run_one
    poison = model._tokenizer.encode("poison pill").ids

    def failing(self: MiniLMEmbedder, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        if ids.tolist() == poison:
            raise RuntimeError("the model failed")
        return run_one(self, ids)

    monkeypatch.setattr(MiniLMEmbedder, "_run_one", failing)
    failed: list[BaseException] = []

    def bad() -> None:
        try:
            model.embed(["fine text", "poison pill", "another fine one"])
        except RuntimeError as error:
            failed.append(error)

    thread = threading.Thread(target=bad)
    thread.start()
    results = _callers(model, 2)
    thread.join()
    assert [str(e) for e in failed] == ["the model failed"]
    assert len(results) == 16
    assert model.embed(["still works"]).shape == (1, 384)


def _workers_alive() -> int:
    return sum(t.name.startswith("pml-embed-") for t in threading.enumerate())


def test_the_workers_stop_once_the_embedder_is_gone() -> None:
    gc.collect()
    before = _workers_alive()
    model = MiniLMEmbedder(workers=3)
    model.embed(["start the workers"])
    assert _workers_alive() == before + 3
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None
    deadline = time.monotonic() + 10
    while _workers_alive() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _workers_alive() == before


def test_a_small_call_goes_ahead_of_a_bulk_call_already_queued(
    model: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_one = MiniLMEmbedder._run_one

    def slow(self: MiniLMEmbedder, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        time.sleep(0.01)  # the bulk call's 60 texts keep both workers busy for about 0.3 s
        return run_one(self, ids)

    monkeypatch.setattr(MiniLMEmbedder, "_run_one", slow)
    alone = model.embed(["what the query is"])[0]
    finished: list[str] = []
    bulk = threading.Thread(
        target=lambda: (model.embed(TEXTS * 10), finished.append("bulk")), daemon=True
    )
    bulk.start()
    time.sleep(0.05)  # the bulk call's texts are queued and running
    assert not finished
    rows = model.embed(["what the query is"])
    finished.append("small")
    bulk.join()
    assert finished == ["small", "bulk"]
    assert np.array_equal(rows[0], alone)
