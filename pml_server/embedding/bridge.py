"""The cross-lingual companion read through a bridge to the primary model's geometry
(docs/ranking.md, Other languages, "The bridge to MiniLM's geometry").

USE multilingual puts a request and its translation close together, but it tells tool
requests apart less sharply than MiniLM does in English. MiniLM's geometry can be learned
from USE's: a linear map `W` (USE 512 -> MiniLM 384, ridge regression, `fit`) from the USE
vectors of English tool requests to their MiniLM vectors. Since USE reads every language in
one space, `W` applied to a French request lands near where MiniLM would have put its English
original. A text's bridged vector joins the two readings,

    bridged(u) = [sqrt(1 - w) u ; sqrt(w) normalize(W u)]       (unit norm)

so the cosine of two bridged vectors is `(1 - w)` USE's cosine plus `w` the cosine of their
mapped vectors, and every signal computed in the companion's space (the semantic part, the
tool profiles, the request parts) reads both with no other change.

`W` ships with the package (`use_to_minilm.npy`, float16, checked by sha256), fitted by
`tools/fit_bridge.py` on the intents of the development data (../shared/devset: MetaTool,
NESTFUL and Seal-Tools executions, never their requests); `BRIDGE_WEIGHT` was chosen on the
multilingual probe's tune part.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import Embedder, l2_normalize, verified_bytes

MAP_PATH = Path(__file__).with_name("use_to_minilm.npy")
MAP_SHA256 = "e96ccf287f5f35fc3785a70a589bef6302b14f68103dd6fb3503c2ffdc035358"
MAP_SHAPE = (512, 384)
# The share of the mapped cosine in the bridged one (docs/ranking.md, "The bridge to MiniLM's
# geometry": chosen on the probe's tune part among 0.35, 0.5, 0.65, 0.8 and 1; the table is in
# docs/history/ranking-experiments.md under the same name).
BRIDGE_WEIGHT = 0.8
# The ridge regression's penalty (0.3 and 3 read the probe's tune part within a request or two
# of 1: docs/history/ranking-experiments.md, the same table).
RIDGE = 1.0
VERSION = "bridge-minilm-v1"


def fit(
    companion: npt.NDArray[np.floating], primary: npt.NDArray[np.floating], ridge: float = RIDGE
) -> npt.NDArray[np.float64]:
    """The ridge regression `W` minimizing |companion W - primary|^2 + ridge |W|^2, the rows
    of both being the same texts' unit vectors."""
    u = companion.astype(np.float64)
    m = primary.astype(np.float64)
    return np.asarray(
        np.linalg.solve(u.T @ u + ridge * np.eye(u.shape[1]), u.T @ m), dtype=np.float64
    )


@functools.cache
def shipped_map() -> npt.NDArray[np.float32]:
    """The package's `W`, verified against its sha256."""
    data = verified_bytes(MAP_PATH, MAP_SHA256)
    mapping = np.load(io.BytesIO(data), allow_pickle=False)
    if mapping.shape != MAP_SHAPE:
        raise ValueError(f"{MAP_PATH}: shape {mapping.shape}, expected {MAP_SHAPE}")
    loaded: npt.NDArray[np.float32] = mapping.astype(np.float32)
    return loaded


def bridged(
    vectors: Matrix, mapping: npt.NDArray[np.float32], weight: float = BRIDGE_WEIGHT
) -> Matrix:
    """`[sqrt(1 - weight) u ; sqrt(weight) normalize(u W)]` for each unit row `u`."""
    mapped = l2_normalize((vectors @ mapping).astype(np.float32))
    joined = np.concatenate([np.sqrt(1.0 - weight) * vectors, np.sqrt(weight) * mapped], axis=1)
    out: Matrix = joined.astype(np.float32)
    return out


class BridgedEmbedder:
    """A companion model whose vectors are `bridged` through the shipped map."""

    def __init__(self, inner: Embedder, mapping: npt.NDArray[np.float32] | None = None) -> None:
        self._inner = inner
        self._map = shipped_map() if mapping is None else mapping
        if self._map.shape[0] != inner.dim:
            raise ValueError(f"the bridge maps {self._map.shape[0]}-d vectors, not {inner.dim}")
        self.model_id = f"{inner.model_id}+{VERSION}"
        self.family = inner.family

    @property
    def dim(self) -> int:
        return self._inner.dim + int(self._map.shape[1])

    def embed(self, texts: Sequence[str]) -> Matrix:
        return bridged(self._inner.embed(texts), self._map)
