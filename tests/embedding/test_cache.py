"""CachedEmbedder shares a text being embedded with every caller that asks for it meanwhile (a
stream embeds its next batch ahead while the capture of that batch may already ask), and a
model failure never leaves a waiter hanging."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from pml_server.domain.limits import LIMITS
from pml_server.domain.lru import ENTRY_BYTES
from pml_server.domain.vectors import Matrix
from pml_server.embedding import CachedEmbedder, HashingEmbedder
from pml_server.embedding.minilm import MiniLMEmbedder
from testing.memory import memory_held


class GatedModel:
    """The hashing embedder behind a gate: a call blocks inside the 'model' until released,
    so a second caller deterministically arrives while the first is embedding."""

    model_id = "gated"
    family = "hashing"

    def __init__(self) -> None:
        self._inner = HashingEmbedder()
        self.dim = self._inner.dim
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_first = False

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(10)
            if self.fail_first:
                raise RuntimeError("model failed")
        return self._inner.embed(texts)


def _second_caller(
    cached: CachedEmbedder, texts: list[str]
) -> tuple[threading.Thread, list[Matrix]]:
    out: list[Matrix] = []
    thread = threading.Thread(target=lambda: out.append(cached.embed(texts)))
    thread.start()
    return thread, out


def test_a_text_being_embedded_is_waited_for_not_embedded_again() -> None:
    model = GatedModel()
    cached = CachedEmbedder(model)
    first, first_out = _second_caller(cached, ["read a file", "parse json"])
    assert model.entered.wait(10)
    second, second_out = _second_caller(cached, ["parse json", "send mail"])
    # the second caller embeds only what nobody is embedding, then waits for the rest
    while len(model.calls) < 2:
        threading.Event().wait(0.01)
    assert model.calls[1] == ["send mail"]
    model.release.set()
    first.join(10)
    second.join(10)
    embedded = sorted(t for call in model.calls for t in call)
    assert embedded == ["parse json", "read a file", "send mail"]
    assert np.array_equal(first_out[0][1], second_out[0][0])  # one vector of "parse json"
    assert np.array_equal(second_out[0][0], HashingEmbedder().embed(["parse json"])[0])
    assert cached.misses == 3


def test_a_waiter_embeds_its_text_itself_when_the_model_failed_for_the_other_caller() -> None:
    model = GatedModel()
    model.fail_first = True
    cached = CachedEmbedder(model)
    errors: list[BaseException] = []

    def failing() -> None:
        try:
            cached.embed(["parse json"])
        except RuntimeError as error:
            errors.append(error)

    first = threading.Thread(target=failing)
    first.start()
    assert model.entered.wait(10)
    second, second_out = _second_caller(cached, ["parse json"])
    model.release.set()
    first.join(10)
    second.join(10)
    assert not second.is_alive()
    assert len(errors) == 1
    assert np.array_equal(second_out[0][0], HashingEmbedder().embed(["parse json"])[0])
    assert cached.embed(["parse json"]).shape == (1, model.dim)  # cached now


@pytest.mark.slow
@pytest.mark.model
def test_minilm_vectors_embedded_ahead_equal_one_text_calls() -> None:
    """Half the texts embedded by one caller while another asks for all of them: every vector
    is the one a one-text call gives (the real model, per-text deterministic)."""
    model = MiniLMEmbedder()
    cached = CachedEmbedder(model)
    texts = [f"rename the holiday photos of trip {i} by date" for i in range(12)]
    ahead = threading.Thread(target=lambda: cached.embed(texts[6:]))
    ahead.start()
    together = cached.embed(texts)
    ahead.join(30)
    for text, vector in zip(texts, together, strict=True):
        assert np.array_equal(vector, model.embed([text])[0])


def test_the_cache_holds_at_most_its_bytes_of_the_longest_texts() -> None:
    """Texts of the longest intents (4,096 characters outside the Basic Multilingual Plane, 4
    bytes each in memory): counted by entries, the default 10,000 of them held about 190 MB;
    counted in bytes (the text, the vector, the entry), the cache holds at most its bound."""
    cached = CachedEmbedder(HashingEmbedder())
    bound = cached.capacity_bytes

    def batches() -> Iterator[list[str]]:  # as many texts as it has entries
        for start in range(0, cached.capacity, 64):
            texts = [f"{n} " + "\U0001f600" * LIMITS.intent.bound for n in range(start, start + 64)]
            yield [t[: LIMITS.intent.bound] for t in texts]

    for texts in batches():  # the hashing model's own cache of features, filled beforehand
        HashingEmbedder().embed(texts)
    with memory_held() as held:
        for texts in batches():
            cached.embed(texts)
        del texts
    # The texts dominate both figures, so the count is within 1% of what is held: 5% of slack
    # for what the interpreter allocates on its own during the run (counted by entries, the
    # same texts held about 5.7 times the bound).
    assert held.nbytes <= bound * 1.05, f"{held.nbytes} bytes held; the bound is {bound}"
    assert cached.weight <= bound


def test_an_entry_counts_its_text_its_vector_and_its_place() -> None:
    """What each entry counts, and eviction by bytes before the count is reached."""
    short, long = "parse json", "x" * 1000
    one = CachedEmbedder(HashingEmbedder(), capacity=100, capacity_bytes=1 << 30)
    one.embed([short])
    vector_bytes = sys.getsizeof(np.zeros(HashingEmbedder().dim, np.float32))
    entry = ENTRY_BYTES + sys.getsizeof(("", "")) + sys.getsizeof(short) + vector_bytes
    assert one.weight == entry
    one.embed([long])
    assert one.weight == 2 * entry + sys.getsizeof(long) - sys.getsizeof(short)
    # room for three short entries: a fourth evicts the least recently used, the count unused
    small = CachedEmbedder(HashingEmbedder(), capacity=100, capacity_bytes=3 * entry + 10)
    small.embed(["read a", "read b", "read c"])
    small.embed(["read a"])  # now the most recently used
    small.embed(["read d"])
    assert small.misses == 4
    small.embed(["read a", "read c", "read d"])
    assert small.misses == 4  # all three kept
    small.embed(["read b"])  # evicted
    assert small.misses == 5
    # what a stream may embed ahead of its capture: only what the cache keeps until then
    assert small.holds(["read a", "read b", "read c"])
    assert not small.holds(["read a", "read b", "read c", "read d"])
    assert not CachedEmbedder(HashingEmbedder(), capacity=2).holds(["read a", "read b", "c"])
