"""BM25 answers, to the last bit of every score, do not depend on the process's hash seed.

Python salts `str` hashes per process, so a `set` of query terms iterates in a different order
after every restart; summing the terms' contributions in that order changed the last bit of the
scores, and with it the order of documents tied in exact arithmetic.
"""

from __future__ import annotations

import os
import subprocess
import sys

_SEARCH_SCRIPT = """
import random
from pml_server.ranking.lexical import LexicalIndex

words = [f"w{i}" for i in range(60)]
rng = random.Random(7)
index = LexicalIndex()
for doc in range(400):
    index.add(f"d{doc}", " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
for _ in range(200):
    query = " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
    print(repr(index.search(query, 10)))
"""


def _answers(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", _SEARCH_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout


def test_bm25_scores_and_ties_are_the_same_under_every_hash_seed() -> None:
    first = _answers("1")
    assert first.count("\n") == 200
    for seed in ("2", "3", "4"):
        assert _answers(seed) == first, f"hash seed {seed} changed BM25 answers"
