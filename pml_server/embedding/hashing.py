"""A deterministic hashing embedder: word unigrams, word bigrams and character trigrams hashed
into a fixed number of signed buckets. No model, microseconds a text; it only sees shared words
and spellings (paraphrases with other words score low), so it is for tests and tiny deployments."""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import l2_normalize

_WORD = re.compile(r"[\w]+", re.UNICODE)


class HashingEmbedder:
    family = "hashing"

    def __init__(self, dim: int = 512) -> None:
        if dim < 8:
            raise ValueError("hashing embedder needs at least 8 dimensions")
        self._dim = dim

    @property
    def model_id(self) -> str:
        return f"hashing-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = [w.lower() for w in _WORD.findall(text)]
        features = [(f"w:{w}", 1.0) for w in words]
        features += [(f"b:{a} {b}", 0.5) for a, b in itertools.pairwise(words)]
        for word in words:
            padded = f"<{word}>"
            features += [(f"c:{padded[i : i + 3]}", 0.25) for i in range(len(padded) - 2)]
        return features

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                bucket, sign = _bucket(feature, self._dim)
                out[row, bucket] += sign * weight
        return l2_normalize(out)


@functools.lru_cache(maxsize=65_536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """Where a feature lands and with which sign. Words and trigrams repeat across texts, and
    hashing each again was most of an embedding's time."""
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dim, 1.0 if digest[4] & 1 else -1.0
