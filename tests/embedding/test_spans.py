"""`embed_spans` (docs/ranking.md, Plans, "Part vectors"): one model run of a text, its token
states pooled over character spans; the text's vector is exactly `embed`'s."""

from __future__ import annotations

import numpy as np
import pytest

from pml_server.domain.limits import LIMITS
from pml_server.embedding import make_embedder
from pml_server.embedding.minilm import MiniLMEmbedder
from pml_server.ranking.plans import MAX_REQUEST_PARTS
from testing.memory import memory_held

TEXT = "Search for the movie Mulholland Drive. Then send an email to my colleague."
SPANS = [(0, 37), (44, 74), (500, 600)]


@pytest.fixture(scope="module")
def model() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_the_vector_is_embeds_and_the_spans_pool_their_tokens(model: MiniLMEmbedder) -> None:
    pools = model.embed_spans(TEXT, SPANS)
    assert np.array_equal(pools.vector, model.embed([TEXT])[0])  # bit for bit
    assert pools.found == (True, True, False)  # the third span lies past the text
    assert not pools.spans[2].any()
    encoding = model._tokenizer.encode(TEXT)
    states = model._states(np.array(encoding.ids, dtype=np.int64))
    np.testing.assert_allclose(pools.mean, states.mean(axis=0), rtol=1e-5, atol=1e-6)
    for (start, end), row in zip(SPANS[:2], pools.spans[:2], strict=True):
        inside = [
            n for n, (a, b) in enumerate(encoding.offsets) if b > a and a >= start and b <= end
        ]
        assert inside  # every word of the span, no [CLS]/[SEP]
        assert all(TEXT[a:b] in TEXT[start:end] for a, b in (encoding.offsets[n] for n in inside))
        np.testing.assert_allclose(row, states[inside].mean(axis=0), rtol=1e-5, atol=1e-6)


def test_the_cache_keeps_the_run_and_the_meter_counts_it() -> None:
    embedder = make_embedder("minilm")
    first = embedder.embed_spans(TEXT, SPANS)
    assert first is not None
    assert embedder.usage().runs == 1
    assert embedder.usage().texts == 1
    again = embedder.embed_spans(TEXT, SPANS)
    assert again is first  # cached: no second run
    assert embedder.usage().runs == 1
    assert np.array_equal(embedder.embed([TEXT])[0], first.vector)  # the vector is cached too
    assert embedder.usage().runs == 1


def test_a_model_without_token_states_has_no_spans() -> None:
    embedder = make_embedder("hashing")
    assert embedder.embed_spans(TEXT, SPANS) is None
    assert embedder.usage().runs == 0


def test_the_span_cache_holds_at_most_its_bytes_of_the_longest_requests() -> None:
    """Requests of the longest intents (4,096 characters outside the Basic Multilingual Plane)
    cut into the most parts: the span pools kept, counted in bytes (the text, the spans, the
    arrays, the entry), stay within the bound, with the vectors cached beside them."""
    bound = 512 * 1024
    embedder = make_embedder("minilm", cache_bytes=bound)
    spans = [(n * 600, n * 600 + 500) for n in range(MAX_REQUEST_PARTS)]
    embedder.embed_spans(TEXT, spans)  # the model's own first-run allocations
    with memory_held() as held:
        for n in range(40):  # past the bound twice over
            text = f"{n} " + "\U0001f600" * LIMITS.intent.bound
            assert embedder.embed_spans(text[: LIMITS.intent.bound], spans) is not None
        del text
    assert held.nbytes <= 2 * bound, (
        f"{held.nbytes} bytes held; the two caches' bound is {2 * bound}"
    )
