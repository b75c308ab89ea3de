"""The input of `rank`: one retrieved pattern with its two relevance signals."""

from __future__ import annotations

from dataclasses import dataclass

from pml_server.domain.model import PatternView


@dataclass(frozen=True)
class Candidate:
    """A pattern the engine retrieved for a query.

    `semantic` is the best cosine between the query and this pattern's intent vectors (0.0 when
    the vector index did not return it); `lexical` the raw BM25 score of its best intent document
    (0.0 when the lexical index did not return it). `tags` are the execution tags the engine
    knows for the pattern (the `tags` filter requires every requested tag among them).
    """

    capability_id: str
    pattern: PatternView
    semantic: float
    lexical: float
    tags: tuple[str, ...] = ()
    # how well its steps fit the tools the request asks for (docs/ranking.md, Steps)
    steps: float = 1.0
