"""The engine interface: everything the API layer may ask of the domain, per tenant.

`pml_server.service.Engine` (capture + storage + embeddings + ranking + retention) implements it.
The API layer depends only on this Protocol, the model types and the error tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from pml_server.domain.model import (
    CapabilityView,
    CaptureResult,
    EmbeddingUsage,
    ExecutionRecord,
    FailureEntry,
    IntentView,
    Page,
    PageRequest,
    PatternView,
    RetentionReport,
    Stats,
    SuggestQuery,
    SuggestResult,
)

# (tenant, pattern id, page) -> a page of the pattern's intents in id order, read alone (not the
# whole pattern). Raises NotFoundError.
IntentPages = Callable[[str, str, PageRequest], Page[IntentView]]
# (tenant, request id) -> the stored answer of a capture under that request id, as replayed, or
# None when none is remembered (a read: nothing captured or counted).
CapturedAnswer = Callable[[str, str], CaptureResult | None]


class EngineProtocol(Protocol):
    pattern_intents: IntentPages
    captured_answer: CapturedAnswer

    def record(self, tenant: str, record: ExecutionRecord) -> CaptureResult:
        """Capture one execution (rules of the eager-learning spec). Idempotent per request id."""

    def record_many(
        self, tenant: str, records: Sequence[ExecutionRecord]
    ) -> list[CaptureResult | Exception]:
        """`record` for each, in order, as one batch (at most `LIMITS.capture_batch`; a
        stream's executions beyond it wait for the next): each
        element is that record's result or the error that refused it alone."""

    def embed_ahead(self, tenant: str, records: Sequence[ExecutionRecord]) -> None:
        """Embed now the intents `record_many` will need the model for, so a stream's next
        batch is embedded while the one before it is written (the vectors are those the
        capture would compute; nothing is captured or counted)."""

    def suggest(self, tenant: str, query: SuggestQuery) -> SuggestResult: ...

    def get_pattern(self, tenant: str, pattern_id: str) -> PatternView:
        """The pattern with its shown intents (domain/shown_intents.py). Raises NotFoundError."""

    def get_capability(self, tenant: str, capability_id: str) -> CapabilityView:
        """Raises NotFoundError."""

    def list_patterns(
        self, tenant: str, page: PageRequest, capability_id: str = ""
    ) -> Page[PatternView]:
        """The tenant's patterns by id, or only those of `capability_id` (NotFoundError
        without it)."""
        ...

    def list_capabilities(self, tenant: str, page: PageRequest) -> Page[CapabilityView]: ...

    def delete_pattern(self, tenant: str, pattern_id: str) -> None:
        """Removes it from store and index at once. Raises NotFoundError."""

    def delete_capability(self, tenant: str, capability_id: str) -> None:
        """Removes the capability and all its patterns. Raises NotFoundError."""

    def list_failures(self, tenant: str, page: PageRequest) -> Page[FailureEntry]: ...

    def run_retention(self, tenant: str, apply: bool) -> RetentionReport: ...

    def stats(self, tenant: str) -> Stats: ...

    def embedding_dim(self) -> int:
        """Dimension a client-supplied intent vector must have."""

    def embedding_usage(self) -> EmbeddingUsage:
        """What the embedding model has cost since the engine opened."""

    def is_ready(self) -> bool:
        """False while the vector index is still catching up with the store."""

    def close(self) -> None:
        """Flush and close the store."""
