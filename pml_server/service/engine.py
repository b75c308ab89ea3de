"""The engine's facade: opens the store, wires the parts together, and answers
`pml_server.domain.engine.EngineProtocol` by delegating to one module per concept:

- `_capture`: record and record_many (the lock order is documented there)
- `_grouping`: which capability a new pattern joins
- `_suggest`: retrieve -> rank -> complete
- `_curation`: deletion, ungrouping, retention marks, applying retention
- `_reads`: patterns, capabilities, failure and audit logs, stats
- `_idempotency`: request results and their pruning
- `_jobs`: index restore at open, snapshots, the retention schedule
- `_writes`: a change's batch, its commit and durability; `_state`: what they all share

`Engine.open(config)` opens the store (the embedded RocksDB, or a shared PostgreSQL one of
several replicas: `storage.seam`), checks that it was written with the configured
embedding model, and restores the in-memory search indexes (vector snapshot + op log replay, or
a rebuild) in a background thread; `is_ready()` turns True when they have caught up, and until
then every call that needs them raises UnavailableError.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence

from pml_server.capture.normalize import normalize
from pml_server.config import EngineConfig
from pml_server.domain.engine import CapturedAnswer, IntentPages
from pml_server.domain.errors import FailedPreconditionError, UnavailableError
from pml_server.domain.model import (
    CapabilityView,
    CaptureResult,
    EmbeddingUsage,
    ExecutionRecord,
    FailureEntry,
    Page,
    PageRequest,
    PatternView,
    RetentionReport,
    Stats,
    SuggestQuery,
    SuggestResult,
)
from pml_server.embedding import CachedEmbedder, make_embedder
from pml_server.embedding.base import Embedder, EmbedderWrapper
from pml_server.service import _capture, _curation, _idempotency, _reads, _suggest
from pml_server.service._admin import EngineAdmin
from pml_server.service._companion import make_companion
from pml_server.service._jobs import BackgroundJobs, write_snapshots
from pml_server.service._state import Clock, EngineState, Normalizer
from pml_server.storage import StoreBackend, open_store

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    """Implements `pml_server.domain.engine.EngineProtocol`."""

    @classmethod
    def open(
        cls, config: EngineConfig, clock: Clock | None = None, normalizer: Normalizer = normalize
    ) -> Engine:
        embedder = make_embedder(
            config.embedder, config.embedding_cache_size, config.embedding_cache_bytes
        )
        companion = make_companion(config)
        store = open_store(config.store, config.data_dir, config.durability, config.pool_size)
        try:
            engine = cls(config, store, embedder, clock or wall_clock_ms, normalizer, companion)
        except BaseException:
            store.close()
            raise
        engine.start()
        return engine

    def __init__(
        self,
        config: EngineConfig,
        store: StoreBackend,
        embedder: Embedder | CachedEmbedder,
        clock: Clock,
        normalizer: Normalizer = normalize,
        companion: CachedEmbedder | None = None,
    ) -> None:
        state = EngineState(config, store, embedder, clock, normalizer, companion)
        stored_model = state.repo.meta.model_id()
        if stored_model is None:
            store.write([state.repo.meta.put_model_id(embedder.model_id)])
        elif stored_model != embedder.model_id:
            raise FailedPreconditionError(
                f"the store at {store.location} holds vectors of embedding model "
                f"{stored_model!r}; this server is configured with {embedder.model_id!r}. "
                "Start it with the store's model, or use another data directory."
            )
        if stale_sessions := state.repo.sessions.rows_keyed_by_id():
            store.write(stale_sessions)  # docs/ranking.md, Sessions
        self._state = state
        # The served store's, a PostgreSQL database's included (GetServerInfo)
        self.schema_version = store.schema_version
        self._jobs = BackgroundJobs(state)
        # What operators, the server's signals and metrics, tests and benches call beyond the
        # API's `EngineProtocol` (service/_admin.py).
        self.admin = EngineAdmin(state, self._jobs)
        # ListPatternIntents' pages (`EngineProtocol.pattern_intents`)
        self.pattern_intents: IntentPages = functools.partial(_reads.pattern_intents, state.repo)
        # A request id's stored capture answer (`EngineProtocol.captured_answer`)
        self.captured_answer: CapturedAnswer = functools.partial(
            _idempotency.captured_answer, state
        )

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Restore the search indexes in the background (and start the periodic jobs)."""
        self._jobs.start()

    def is_ready(self) -> bool:
        return self._state.readiness.is_ready()

    def close(self) -> None:
        """Stop the background jobs, snapshot the indexes, flush and close the store. Callers
        (the API) drain in-flight calls first. Closing twice is harmless."""
        if not self._jobs.stop():
            return
        if self._state.companion_filler is not None:
            self._state.companion_filler.stop()
        ready = self.is_ready()
        self._state.readiness.clear()  # from now on record/suggest answer UNAVAILABLE
        if ready:
            try:
                write_snapshots(self._state, trim_oplog=True)
            except UnavailableError as err:  # a full disk, a database gone: the store closes
                # anyway; the next open replays the op log (docs/storage.md, The op log and the
                # notifier)
                log.error("index snapshots not written at close: %s", err)
        self._state.store.close()

    def embedding_dim(self) -> int:
        return self._state.embedder.dim

    def embedding_usage(self) -> EmbeddingUsage:
        """What the model has cost so far (zeros for an embedder built without a meter)."""
        embedder = self._state.embedder
        return embedder.usage() if isinstance(embedder, EmbedderWrapper) else EmbeddingUsage()

    # ---- capture and suggest -----------------------------------------------------------------

    def record(self, tenant: str, record: ExecutionRecord) -> CaptureResult:
        try:
            return _capture.record(self._state, tenant, record)
        finally:
            _fill_companion(self._state, tenant)

    def record_many(
        self, tenant: str, records: Sequence[ExecutionRecord]
    ) -> list[CaptureResult | Exception]:
        try:
            return _capture.record_many(self._state, tenant, records)
        finally:
            _fill_companion(self._state, tenant)

    def embed_ahead(self, tenant: str, records: Sequence[ExecutionRecord]) -> None:
        _capture.embed_ahead(self._state, tenant, records)

    def suggest(self, tenant: str, query: SuggestQuery) -> SuggestResult:
        return _suggest.suggest(self._state, tenant, query)

    # ---- reads -------------------------------------------------------------------------------

    def get_pattern(self, tenant: str, pattern_id: str) -> PatternView:
        return _reads.get_pattern(self._state.repo, tenant, pattern_id)

    def get_capability(self, tenant: str, capability_id: str) -> CapabilityView:
        return _reads.get_capability(self._state.repo, tenant, capability_id)

    def list_patterns(
        self, tenant: str, page: PageRequest, capability_id: str = ""
    ) -> Page[PatternView]:
        return _reads.list_patterns(self._state.repo, tenant, page, capability_id)

    def list_capabilities(self, tenant: str, page: PageRequest) -> Page[CapabilityView]:
        return _reads.list_capabilities(self._state.repo, tenant, page)

    def list_failures(self, tenant: str, page: PageRequest) -> Page[FailureEntry]:
        return _reads.list_failures(self._state.repo, tenant, page)

    def stats(self, tenant: str) -> Stats:
        return _reads.stats(self._state.repo, tenant)

    # ---- curation ----------------------------------------------------------------------------

    def delete_pattern(self, tenant: str, pattern_id: str, reason: str = "manual") -> None:
        _curation.delete_pattern_from_disk(self._state, tenant, pattern_id, reason)

    def delete_capability(self, tenant: str, capability_id: str) -> None:
        _curation.delete_capability(self._state, tenant, capability_id)

    def run_retention(self, tenant: str, apply: bool) -> RetentionReport:
        return _curation.run_retention(self._state, tenant, apply)


def _fill_companion(state: EngineState, tenant: str) -> None:
    """The new intents' cross-lingual vectors, on the companion's thread, for a tenant that
    uses it (service/_companion.py)."""
    filler = state.companion_filler
    index = state.indexes.get(tenant)
    if (
        filler is not None
        and index is not None
        and index.companion is not None
        and index.companion.active
    ):
        filler.request(index)
