"""The service benchmark's workload, shared by the store builder, the load client and the Chroma
peer so every side sees the same intents, code and vectors.

Execution `i` has its own intent text, its own tool signature (so captures never collapse into
one pattern) and a 384-d vector drawn around one of 200 cluster centres. The noise is large
enough that two executions of a cluster stay far below the duplicate and grouping thresholds
(cosine about 0.3): a store of N executions holds N patterns and N intents.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

DIM = 384
CLUSTERS = 200
_NOISE = 1.5
_VERBS = ("read", "parse", "load", "write", "convert", "merge", "upload", "rename", "index", "sync")
_OBJECTS = (
    "json file",
    "csv export",
    "photo album",
    "invoice batch",
    "log archive",
    "email thread",
    "database table",
    "spreadsheet",
    "config map",
    "markdown notes",
    "calendar events",
    "git history",
)
_PLACES = ("from disk", "into the warehouse", "for the weekly report", "on the shared drive")


def intent_text(i: int) -> str:
    """A short, human-looking intent, unique per `i` (the last word carries the id)."""
    verb = _VERBS[i % len(_VERBS)]
    obj = _OBJECTS[(i // len(_VERBS)) % len(_OBJECTS)]
    place = _PLACES[(i // 120) % len(_PLACES)]
    return f"{verb} the {obj} {place} batch{i}"


def query_text(j: int) -> str:
    """A Suggest query: same vocabulary as the stored intents, never an exact repeat of one, so
    the server's embedding cache cannot answer it."""
    return f"{intent_text(j * 7 + 3)} quickly run{j}"


def tools_for(i: int) -> list[str]:
    """Two tools whose pair is unique per `i` below 1,000,000."""
    return [f"tool_{i % 1000}", f"step_{i // 1000}"]


def code_for(i: int) -> str:
    first, second = tools_for(i)
    return f'const a = await mcp.{first}({{path: "in{i}.json"}});\nawait mcp.{second}(a);'


def _centres() -> NDArray[np.float32]:
    return np.random.default_rng(12345).standard_normal((CLUSTERS, DIM)).astype(np.float32)


def _draw(count: int, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    centres = _centres()
    out = np.empty((count, DIM), np.float32)
    for start in range(0, count, 50_000):  # chunks keep the float64 temporaries small
        m = min(50_000, count - start)
        rows = centres[rng.integers(0, CLUSTERS, m)] + _NOISE * rng.standard_normal((m, DIM))
        out[start : start + m] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def stored_vectors(count: int, offset: int = 0) -> NDArray[np.float32]:
    """Unit vectors of executions `offset .. offset+count` (deterministic; blocks of 10,000 are
    drawn from their own seed so any range is cheap to regenerate)."""
    first_block, last_block = offset // 10_000, (offset + count - 1) // 10_000
    blocks = [_draw(10_000, 1000 + b) for b in range(first_block, last_block + 1)]
    joined = np.concatenate(blocks) if blocks else np.empty((0, DIM), np.float32)
    start = offset - first_block * 10_000
    return joined[start : start + count]


def query_vectors(count: int) -> NDArray[np.float32]:
    """Unit query vectors from the same clusters as the stored ones."""
    return _draw(count, 7)
