"""The one array alias of embedding vectors, shared by every package that holds them."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# One L2-normalized float32 embedding (a dot product of two is their cosine).
Vector = npt.NDArray[np.float32]
# Rows of vectors, one per text or intent.
Matrix = npt.NDArray[np.float32]
