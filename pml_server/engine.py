"""The engine: composition root of capture, store, embeddings, indexes, ranking and retention.

`Engine.open(config)` opens the RocksDB store, checks that it was written with the configured
embedding model, and restores the in-memory search indexes (vector snapshot + op log replay, or
a rebuild) in a background thread; `is_ready()` turns True when they have caught up, and until
then every call that needs them raises UnavailableError.

Concurrency: a capture holds a striped lock for its request id (idempotency), then one for its
code hash (exact read-modify-write of the pattern's counters), then, only when it creates a
pattern, one for its tool signature (capability grouping), and last a per-tenant lock for the
tenant's stats and failure log. Everything a capture changes goes to the store as one batch,
submitted while the locks are held (the store's overlay makes it visible to the next holder at
once) and awaited after the inner locks are released, so group commit can merge concurrent
captures into one fsync.

This module keeps what needs the engine's locks, threads and allocators; what only reads or
builds from the repository lives beside it: `engine_restore` (index restore at open),
`engine_candidates` (suggest's candidates), `engine_views` (read views), `engine_deletion` (what
deleting a pattern writes), `engine_grouping` (choosing a new pattern's capability),
`engine_change` (a capture's batch), `engine_request_results` (idempotency answers) and
`engine_arguments` (tenant and page checks).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pml_server import _core
from pml_server.capture import json_form
from pml_server.capture.dedup import (
    DEFAULT_THRESHOLDS,
    SimilarityThresholds,
    choose_capability,
    near_duplicate,
)
from pml_server.capture.locks import StripedLocks
from pml_server.capture.normalize import NormalizedCode, normalize
from pml_server.capture.records import (
    CapabilityRecord,
    IntentRecord,
    ParamSpec,
    PatternCounters,
    PatternRecord,
    TenantStats,
)
from pml_server.capture.redact import redact_record
from pml_server.capture.rules import (
    CaptureLimits,
    check_pattern_size,
    count_failed_try,
    count_success,
    redacted_values,
    run_succeeded,
    tool_failures,
    tool_signature,
    tools_disagree,
    tools_used,
    validate_record,
)
from pml_server.capture.views import capability_view
from pml_server.config import EngineConfig
from pml_server.domain.engine import MAX_CAPTURE_BATCH
from pml_server.domain.errors import (
    FailedPreconditionError,
    FieldViolation,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from pml_server.domain.model import (
    CapabilityView,
    CaptureOutcome,
    CaptureResult,
    EmbeddingUsage,
    ExecutionRecord,
    FailureEntry,
    Page,
    PageRequest,
    PatternView,
    RetentionAction,
    RetentionReport,
    Stats,
    SuggestQuery,
    SuggestResult,
)
from pml_server.embedding import CachedEmbedder, check_client_vector, make_embedder
from pml_server.embedding.base import Embedder, EmbedderWrapper, Vector
from pml_server.embedding.search_index import TenantSearchIndex
from pml_server.engine_arguments import check_page, check_tenant
from pml_server.engine_candidates import retrieve
from pml_server.engine_change import Change, await_durable, failure_entries
from pml_server.engine_deletion import pattern_removal
from pml_server.engine_grouping import capability_vectors, nearest_allowed_capability
from pml_server.engine_request_results import encode_result, replay_answer
from pml_server.engine_restore import restore_indexes
from pml_server.engine_views import (
    capability_members,
    stored_pattern_view,
    views_by_capability,
)
from pml_server.ranking import default_ranking, rank_lazily, score_ceiling
from pml_server.retention import evaluate
from pml_server.storage import Store
from pml_server.storage.allocator import BlockAllocator
from pml_server.storage.repo import Repository, tools_digest
from pml_server.storage.rocks import Op, StoreClosedError, WriteTicket

Clock = Callable[[], int]
IndexAdd = tuple[IntentRecord, tuple[str, ...]]
Normalizer = Callable[[str, str], NormalizedCode]
MAX_TAGS = 32
# Capabilities compared when a new pattern looks for a group (same tool signature).
MAX_GROUP_CANDIDATES = 64
# Beyond that many, the nearest intents the vector index is asked for.
NEAREST_INTENTS_FOR_GROUPING = 256


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    """Implements `pml_server.domain.engine.EngineProtocol`."""

    @classmethod
    def open(
        cls, config: EngineConfig, clock: Clock | None = None, normalizer: Normalizer = normalize
    ) -> Engine:
        embedder = make_embedder(config.embedder, config.embedding_cache_size)
        store = Store(config.data_dir, config.durability)
        try:
            engine = cls(config, store, embedder, clock or wall_clock_ms, normalizer)
        except BaseException:
            store.close()
            raise
        engine.start()
        return engine

    def __init__(
        self,
        config: EngineConfig,
        store: Store,
        embedder: Embedder | CachedEmbedder,
        clock: Clock,
        normalizer: Normalizer = normalize,
    ) -> None:
        self._config = config
        self._ranking = (
            config.ranking if config.ranking is not None else default_ranking(config.embedder)
        )
        self._store = store
        self._repo = Repository(store)
        self._embedder = embedder
        self._clock = clock
        self._normalizer = normalizer
        stored_model = self._repo.model_id()
        if stored_model is None:
            store.write([self._repo.put_model_id(embedder.model_id)])
        elif stored_model != embedder.model_id:
            raise FailedPreconditionError(
                f"the store at {config.data_dir} holds vectors of embedding model "
                f"{stored_model!r}; this server is configured with {embedder.model_id!r}. "
                "Start it with the store's model, or use another data directory."
            )
        defaults = DEFAULT_THRESHOLDS[embedder.family]
        self._thresholds = SimilarityThresholds(
            intent_duplicate=config.intent_duplicate_threshold or defaults.intent_duplicate,
            capability_group=config.capability_group_threshold or defaults.capability_group,
        )
        self._limits = CaptureLimits(
            max_code_bytes=config.max_code_bytes,
            max_tool_calls=config.max_tool_calls,
            recent_values_per_param=config.recent_values_per_param,
        )
        self._request_locks = StripedLocks(1024)
        self._pattern_locks = StripedLocks(1024)
        self._group_locks = StripedLocks(256)
        self._tenant_locks = StripedLocks(64)
        # Each tenant's stats as this engine last submitted them. Only `_commit` writes stats,
        # under the tenant's lock, so this is what the store (with its write overlay) would
        # answer: every capture skips a read and a JSON decode. Set only once a submit was
        # accepted; after a failed write the store refuses every later one.
        self._submitted_stats: dict[str, TenantStats] = {}
        self._intent_ids = BlockAllocator(self._repo, "intent")
        self._seqs = BlockAllocator(self._repo, "seq")
        self._indexes: dict[str, TenantSearchIndex] = {}
        self._indexes_lock = threading.Lock()
        # Index additions of the batch this thread is capturing (`record_many`), if any.
        self._staged_adds = threading.local()
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Restore the search indexes in the background (and start the retention job)."""
        loader = threading.Thread(target=self._load_indexes, name="pml-index-loader", daemon=True)
        self._threads.append(loader)
        loader.start()
        if self._config.snapshot_interval_seconds > 0:
            saver = threading.Thread(target=self._snapshot_loop, name="pml-snapshots", daemon=True)
            self._threads.append(saver)
            saver.start()
        if self._config.retention_in_background:
            job = threading.Thread(target=self._retention_loop, name="pml-retention", daemon=True)
            self._threads.append(job)
            job.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        if self._load_error is not None:
            raise self._load_error
        return self._ready.is_set()

    def is_ready(self) -> bool:
        return self._ready.is_set() and self._load_error is None

    def _require_ready(self) -> None:
        if not self.is_ready():
            raise UnavailableError("the search index is still catching up with the store")

    def _load_indexes(self) -> None:
        try:
            self._indexes = restore_indexes(
                self._repo, self._config.vector_index, self._embedder.dim
            )
            # Nothing writes before ready: snapshot now so the next start replays nothing.
            self._write_snapshots(trim_oplog=True)
            for tenant in self._indexes:
                # Read every counter once now rather than in some tenant's first Suggest (at
                # 100k patterns that call took seconds, and held up the calls behind it).
                self._repo.counter_ceilings(tenant)
            self._ready.set()
        except BaseException as error:  # reported by wait_ready; is_ready stays False
            self._load_error = error
            self._ready.set()

    def snapshot_indexes(self) -> None:
        """Persist every tenant's vector index (the op log is kept: see `_write_snapshots`)."""
        if self.is_ready():
            self._write_snapshots(trim_oplog=False)

    def _write_snapshots(self, trim_oplog: bool) -> None:
        """Trimming the op log is only safe when no capture or deletion runs (at open before
        ready, at close after the API drained): otherwise a removal the snapshot missed could
        be dropped from the log."""
        with self._indexes_lock:
            indexes = dict(self._indexes)
        seq = self._seqs.last_issued()
        # An index unchanged since its stored snapshot holds every removal logged so far, so
        # trimming the log stays safe without writing it again.
        taken = {t: i.snapshot() for t, i in indexes.items() if i.has_unsaved_changes()}
        ops: list[Op] = [self._repo.put_snapshot(t, seq, data) for t, (data, _) in taken.items()]
        if trim_oplog:
            ops += self._repo.delete_oplog_through(seq)
        if ops:
            self._store.write(ops)
        for tenant, (_, changes) in taken.items():
            indexes[tenant].mark_saved(changes)

    def close(self) -> None:
        """Stop the background jobs, snapshot the indexes, flush and close the store. Callers
        (the API) drain in-flight calls first. Closing twice is harmless."""
        if self._stop.is_set():
            return
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        ready = self.is_ready()
        self._ready.clear()  # from now on record/suggest answer UNAVAILABLE
        if ready:
            self._write_snapshots(trim_oplog=True)
        self._store.close()

    def _snapshot_loop(self) -> None:
        while not self._stop.wait(self._config.snapshot_interval_seconds):
            with contextlib.suppress(Exception):  # retried at the next interval and at close
                self.snapshot_indexes()

    def _retention_loop(self) -> None:
        interval = self._config.retention.interval_seconds
        while not self._stop.wait(interval):
            with self._indexes_lock:
                tenants = list(self._indexes)
            for tenant in tenants:
                with contextlib.suppress(Exception):
                    self.run_retention(tenant, apply=True)

    # ---- helpers -----------------------------------------------------------------------------

    def embedding_dim(self) -> int:
        return self._embedder.dim

    def embedding_usage(self) -> EmbeddingUsage:
        """What the model has cost so far (zeros for an embedder built without a meter)."""
        embedder = self._embedder
        return embedder.usage() if isinstance(embedder, EmbedderWrapper) else EmbeddingUsage()

    def _embed_one(self, text: str) -> Vector:
        vector: Vector = self._embedder.embed([text])[0]
        if not np.isfinite(vector).all() or not np.any(vector):
            # e.g. the hashing embedder finds no word in "{": a zero vector has no direction,
            # and the index refuses it (at capture after the write, and at every restart).
            raise InvalidArgumentError(
                FieldViolation("intent", "has no words the embedding model can use")
            )
        return vector

    def _index_for(self, tenant: str) -> TenantSearchIndex:
        with self._indexes_lock:
            index = self._indexes.get(tenant)
            if index is None:
                index = TenantSearchIndex(self._config.vector_index, self._embedder.dim)
                self._indexes[tenant] = index
            return index

    def _replay(self, tenant: str, prior: bytes) -> CaptureResult:
        return replay_answer(prior, lambda pid: self._repo.pattern(tenant, pid) is not None)

    def _normalize(self, record: ExecutionRecord) -> NormalizedCode:
        try:
            normalized = self._normalizer(record.code, record.language)
        except _core.CoreError as error:
            name = "language" if "language" in str(error).lower() else "code"
            raise InvalidArgumentError(FieldViolation(name, str(error))) from error
        check_pattern_size(normalized, self._limits)
        return normalized

    def _commit(self, tenant: str, change: Change) -> WriteTicket:
        """Add the tenant's stats and failure log to `change.ops` and submit them as one batch.
        Inside `record_many` the index additions wait in the batch's list (one index call for
        the whole batch); otherwise they are applied at once."""
        with self._tenant_locks.lock_for(tenant):
            stats = self._submitted_stats.get(tenant)
            if stats is None:
                stats = self._repo.stats(tenant)
            logged = len(change.failures)
            if logged:
                retained = min(stats.failures_logged, self._config.failure_log_size)
                excess = retained + logged - self._config.failure_log_size
                for entry in change.failures:
                    change.ops.append(self._repo.put_failure(tenant, self._seqs.next(), entry))
                if excess > 0:
                    for key in self._repo.oldest_failure_keys(tenant, excess):
                        change.ops.append(self._repo.delete_failure(key))
                change.count("failures_logged", logged)
            if change.stats:
                values = {k: getattr(stats, k) + v for k, v in change.stats.items()}
                stats = replace(stats, **values)
                change.ops.append(self._repo.put_stats(tenant, stats))
            try:
                ticket = self._store.submit(change.ops)
            except StoreClosedError as error:
                raise UnavailableError(f"the store is not accepting writes: {error}") from error
            self._submitted_stats[tenant] = stats
        staged: list[IndexAdd] | None = getattr(self._staged_adds, "adds", None)
        if staged is not None and not change.index_removes:
            staged += change.index_adds
        elif change.index_adds or change.index_removes:
            index = self._index_for(tenant)
            index.remove(change.index_removes)
            for intent, tools in change.index_adds:
                index.add(intent, tools)
        return ticket

    def _apply_staged_adds(self, tenant: str) -> None:
        """Index what this thread's batch has staged so far (see `record_many`)."""
        staged: list[IndexAdd] | None = getattr(self._staged_adds, "adds", None)
        if staged:
            self._index_for(tenant).add_many(staged)
            staged.clear()

    def _oplog(self, tenant: str, op: str, ids: Sequence[int]) -> Op:
        return self._repo.put_oplog(
            self._seqs.next(), {"tenant": tenant, "op": op, "ids": list(ids)}
        )

    def _new_intent(self, pattern_id: str, text: str, vector: Vector, now: int) -> IntentRecord:
        return IntentRecord(
            id=self._intent_ids.next(),
            pattern_id=pattern_id,
            text=text,
            hit_count=1,
            last_seen_ms=now,
            model_id=self._embedder.model_id,
            vector=vector,
        )

    # ---- capture -----------------------------------------------------------------------------

    def record(self, tenant: str, record: ExecutionRecord) -> CaptureResult:
        check_tenant(tenant)
        validate_record(record, self._limits)
        client_vector = (
            check_client_vector(record.intent_embedding, self._embedder.dim, "intent_embedding")
            if record.intent_embedding is not None
            else None
        )
        self._require_ready()
        succeeded = run_succeeded(record)
        with self._request_locks.lock_for(tenant, record.request_id):
            prior = self._repo.request_result(tenant, record.request_id)
            if prior is not None:
                return self._replay(tenant, prior)  # rule 6: the first answer, counted once
            normalized = self._normalize(record)  # bad code is refused before embedding
            vector = client_vector
            if vector is None and succeeded:
                vector = self._embed_one(record.intent)
            result, ticket = self._capture_one_locked(tenant, record, vector, normalized)
            await_durable(ticket)
        return result

    def record_many(
        self, tenant: str, records: Sequence[ExecutionRecord]
    ) -> list[CaptureResult | Exception]:
        """Capture `records` in order with the outcomes and counters of as many consecutive
        `record` calls (a code repeated in the batch counts against the pattern the earlier
        record saved, a repeated request id answers `replayed`), but embed the intents in one
        call, index the new intents in one call and wait for durability once. Each element is
        the record's result, or the error that refused that record alone.

        Every request id of the batch stays locked until the whole batch is durable, so no
        other call answers `replayed` for a write that could still be lost. The stripes are
        taken in one global order (by identity) before any other lock: two batches, or a batch
        and `record`, never wait on each other in a cycle."""
        check_tenant(tenant)
        if len(records) > MAX_CAPTURE_BATCH:
            raise InvalidArgumentError(
                FieldViolation("records", f"at most {MAX_CAPTURE_BATCH} in one batch")
            )
        self._require_ready()
        outcomes: list[CaptureResult | Exception | None] = [None] * len(records)
        vectors: list[Vector | None] = [None] * len(records)
        for i, record in enumerate(records):
            try:
                validate_record(record, self._limits)
                if record.intent_embedding is not None:
                    vectors[i] = check_client_vector(
                        record.intent_embedding, self._embedder.dim, "intent_embedding"
                    )
            except InvalidArgumentError as error:
                outcomes[i] = error
        stripes = {
            id(lock): lock
            for i, r in enumerate(records)
            if outcomes[i] is None
            for lock in [self._request_locks.lock_for(tenant, r.request_id)]
        }
        with contextlib.ExitStack() as held:
            for key in sorted(stripes):
                held.enter_context(stripes[key])
            tickets = self._capture_batch_locked(tenant, records, outcomes, vectors)
            for i, ticket in tickets:
                try:
                    await_durable(ticket)
                except UnavailableError as error:
                    outcomes[i] = error
        return [o if o is not None else UnavailableError("not captured") for o in outcomes]

    def _capture_batch_locked(
        self,
        tenant: str,
        records: Sequence[ExecutionRecord],
        outcomes: list[CaptureResult | Exception | None],
        vectors: list[Vector | None],
    ) -> list[tuple[int, WriteTicket]]:
        """The body of `record_many` while its request ids are locked; fills `outcomes` and
        returns the write tickets to wait for."""
        first_of: dict[str, int] = {}  # request id -> the record of the batch that applies it
        for i, record in enumerate(records):
            if outcomes[i] is None and record.request_id not in first_of:
                first_of[record.request_id] = i
        # One multi-get for every request id of the batch (it releases the GIL).
        priors = self._repo.request_results(tenant, list(first_of))
        needs_text_vector = []
        for prior, i in zip(priors, first_of.values(), strict=True):
            record = records[i]
            if prior is not None:  # applied before this batch: its first answer, as `record`
                outcomes[i] = self._replay(tenant, prior)
            elif vectors[i] is None and run_succeeded(record):
                needs_text_vector.append(i)
        self._embed_batch(records, needs_text_vector, vectors, outcomes)
        tickets: list[tuple[int, WriteTicket]] = []
        ticket_of: dict[int, WriteTicket] = {}
        self._staged_adds.adds = []
        try:
            for i, record in enumerate(records):
                if outcomes[i] is not None:
                    continue
                first = first_of[record.request_id]
                if first != i:  # applied by an earlier record of this batch: its answer
                    earlier = outcomes[first]
                    outcomes[i] = (
                        replace(earlier, replayed=True)
                        if isinstance(earlier, CaptureResult)
                        else earlier
                    )
                    if first in ticket_of:  # answered once the earlier write is durable
                        tickets.append((i, ticket_of[first]))
                    continue
                try:
                    outcomes[i], ticket = self._capture_one_locked(tenant, record, vectors[i])
                except Exception as error:  # refuses this record alone, as `record` would
                    outcomes[i] = error
                    continue
                ticket_of[i] = ticket
                tickets.append((i, ticket))
            self._apply_staged_adds(tenant)
        finally:
            self._staged_adds.adds = None
        return tickets

    def _embed_batch(
        self,
        records: Sequence[ExecutionRecord],
        wanted: list[int],
        vectors: list[Vector | None],
        outcomes: list[CaptureResult | Exception | None],
    ) -> None:
        """Embed the intents of the `wanted` records in one embedder call; a text the model
        finds no word in is refused like `_embed_one` refuses it."""
        if not wanted:
            return
        embedded = self._embedder.embed([records[i].intent for i in wanted])
        for i, vector in zip(wanted, embedded, strict=True):
            if np.isfinite(vector).all() and np.any(vector):
                vectors[i] = vector
            else:
                outcomes[i] = InvalidArgumentError(
                    FieldViolation("intent", "has no words the embedding model can use")
                )

    def _capture_one_locked(
        self,
        tenant: str,
        record: ExecutionRecord,
        vector: Vector | None,
        normalized: NormalizedCode | None = None,
    ) -> tuple[CaptureResult, WriteTicket]:
        """`record` after validation, embedding and the replay check, its request id locked
        (`normalized`: its code already normalized, else done here)."""
        if normalized is None:
            normalized = self._normalize(record)
        record = redact_record(record, normalized)  # rule 7: before anything is written
        with contextlib.ExitStack() as held:
            held.enter_context(self._pattern_locks.lock_for(tenant, normalized.code_hash))
            change = Change()
            result = self._capture_locked(tenant, record, normalized, vector, change, held)
            change.ops.append(
                self._repo.put_request_result(
                    tenant, record.request_id, encode_result(result, self._clock())
                )
            )
            return result, self._commit(tenant, change)

    def _capture_locked(
        self,
        tenant: str,
        record: ExecutionRecord,
        normalized: NormalizedCode,
        vector: Vector | None,
        change: Change,
        held: contextlib.ExitStack,
    ) -> CaptureResult:
        now = self._clock()
        pattern_id = self._repo.pattern_id_for_hash(tenant, normalized.code_hash)
        pattern = self._repo.pattern(tenant, pattern_id) if pattern_id else None
        counters = self._repo.counters(tenant, pattern_id) if pattern_id else None
        failures = tool_failures(record)
        if pattern is None or counters is None:
            if vector is None:  # rule 1: a new pattern with a failure is not saved
                change.count("rejected")
                change.failures = failure_entries(record, normalized.code_hash, "", now)
                return CaptureResult(CaptureOutcome.REJECTED, tool_failures=failures)
            return self._insert_pattern(tenant, record, normalized, vector, change, held, now)
        change.count("executions")
        values = redacted_values(normalized.params)
        used = tools_used(record)
        if vector is None:  # rule 2: a failed try of a known pattern; rule 7: its values, error
            counted = count_failed_try(counters, record, values, now, self._limits)
            change.failures = failure_entries(record, normalized.code_hash, pattern.id, now)
            change.ops.append(self._repo.put_counters(tenant, pattern.id, counted))
            return CaptureResult(
                CaptureOutcome.COUNTED,
                pattern_id=pattern.id,
                capability_id=pattern.capability_id,
                tool_failures=failures,
            )
        mismatch = tools_disagree(normalized.tool_calls, used, normalized.parse_ok)
        counted = count_success(counters, record, values, mismatch, now, self._limits)
        counted.tags = sorted({*counted.tags, *record.tags})[:MAX_TAGS]
        change.ops.append(self._repo.put_counters(tenant, pattern.id, counted))
        intents = self._repo.intents(tenant, pattern.id)
        duplicate = near_duplicate(
            [i.vector for i in intents], vector, self._thresholds.intent_duplicate
        )
        if duplicate is not None:  # rule 5: bump the existing mapping, no new vector
            old = intents[duplicate]
            bumped = replace(old, hit_count=old.hit_count + 1, last_seen_ms=now)
            change.ops.append(self._repo.put_intent(tenant, bumped))
        else:
            intent = self._new_intent(pattern.id, record.intent, vector, now)
            change.ops += [
                self._repo.put_intent(tenant, intent),
                self._oplog(tenant, "add", [intent.id]),
            ]
            change.index_adds.append((intent, pattern.tools_used))
            change.count("intents")
        return CaptureResult(
            CaptureOutcome.COUNTED,
            pattern_id=pattern.id,
            capability_id=pattern.capability_id,
            tool_mismatch=mismatch,
        )

    def _choose_capability(
        self, tenant: str, signature: tuple[str, ...], vector: Vector
    ) -> str | None:
        """The capability of the same tool signature holding the intent closest to `vector`,
        if close enough. Few such capabilities: compare with all their intents (exact). Many
        (a popular tool): ask the vector index for the nearest intents instead, so creating a
        pattern never reads a whole crowded signature."""
        same_tools = self._repo.capabilities_with_tools(tenant, signature)
        threshold = self._thresholds.capability_group
        if len(same_tools) <= MAX_GROUP_CANDIDATES:
            candidates = capability_vectors(self._repo, tenant, same_tools)
            return choose_capability(candidates, vector, threshold)
        self._apply_staged_adds(tenant)  # the earlier records of a batch are candidates too
        index = self._index_for(tenant)
        return nearest_allowed_capability(
            self._repo,
            tenant,
            index,
            vector,
            set(same_tools),
            threshold,
            NEAREST_INTENTS_FOR_GROUPING,
        )

    def _insert_pattern(
        self,
        tenant: str,
        record: ExecutionRecord,
        normalized: NormalizedCode,
        vector: Vector,
        change: Change,
        held: contextlib.ExitStack,
        now: int,
    ) -> CaptureResult:
        """Rule 3: a new successful pattern, usage=1 success=1, grouped into a capability."""
        used = tools_used(record)
        signature = tool_signature(used)
        # Held until the batch is submitted, so two new patterns of one signature never both
        # create a capability.
        held.enter_context(self._group_locks.lock_for(tenant, tools_digest(signature)))
        chosen = self._choose_capability(tenant, signature, vector)
        pattern_id = f"pat_{secrets.token_hex(8)}"
        existing = self._repo.capability(tenant, chosen) if chosen else None
        if existing is not None:
            capability = replace(existing, pattern_ids=(*existing.pattern_ids, pattern_id))
        else:
            capability = CapabilityRecord(
                f"cap_{secrets.token_hex(8)}", signature, (pattern_id,), now
            )
            change.count("capabilities")
        mismatch = tools_disagree(normalized.tool_calls, used, normalized.parse_ok)
        pattern = PatternRecord(
            id=pattern_id,
            code_hash=normalized.code_hash,
            template=normalized.template,
            original_code=record.code,
            language=normalized.language,
            tools_used=used,
            params=tuple(ParamSpec(p.name, p.json_type, p.secret) for p in normalized.params),
            parameter_schema_json=normalized.schema_json,
            capability_id=capability.id,
            first_seen_ms=now,
            code_tools=normalized.tool_calls,
            parse_ok=normalized.parse_ok,
        )
        values = redacted_values(normalized.params)
        counters = count_success(PatternCounters(), record, values, mismatch, now, self._limits)
        counters.tags = sorted(set(record.tags))[:MAX_TAGS]
        intent = self._new_intent(pattern_id, record.intent, vector, now)
        change.ops += [
            self._repo.put_pattern(tenant, pattern),
            self._repo.put_hash(tenant, pattern.code_hash, pattern_id),
            self._repo.put_counters(tenant, pattern_id, counters),
            self._repo.put_intent(tenant, intent),
            *self._repo.put_capability(tenant, capability),
            self._oplog(tenant, "add", [intent.id]),
        ]
        change.index_adds.append((intent, used))
        for name in ("patterns", "intents", "executions"):
            change.count(name)
        return CaptureResult(
            CaptureOutcome.SAVED,
            pattern_id=pattern_id,
            capability_id=capability.id,
            new_pattern=True,
            tool_mismatch=mismatch,
        )

    # ---- reads -------------------------------------------------------------------------------

    def _pattern_view(self, tenant: str, record: PatternRecord) -> PatternView | None:
        return stored_pattern_view(self._repo, tenant, record)

    def get_pattern(self, tenant: str, pattern_id: str) -> PatternView:
        check_tenant(tenant)
        record = self._repo.pattern(tenant, pattern_id)
        view = self._pattern_view(tenant, record) if record else None
        if view is None:
            raise NotFoundError(f"pattern {pattern_id!r} not found")
        return view

    def get_capability(self, tenant: str, capability_id: str) -> CapabilityView:
        check_tenant(tenant)
        record = self._repo.capability(tenant, capability_id)
        if record is None:
            raise NotFoundError(f"capability {capability_id!r} not found")
        return capability_view(record, capability_members(self._repo, tenant, record))

    def list_patterns(self, tenant: str, page: PageRequest) -> Page[PatternView]:
        check_tenant(tenant)
        check_page(page)
        records, cursor = self._repo.patterns_page(tenant, page.cursor, page.page_size)
        views = [v for v in (self._pattern_view(tenant, r) for r in records) if v is not None]
        return Page(tuple(views), cursor)

    def list_capabilities(self, tenant: str, page: PageRequest) -> Page[CapabilityView]:
        check_tenant(tenant)
        check_page(page)
        records, cursor = self._repo.capabilities_page(tenant, page.cursor, page.page_size)
        views = [capability_view(r, capability_members(self._repo, tenant, r)) for r in records]
        return Page(tuple(views), cursor)

    def list_failures(self, tenant: str, page: PageRequest) -> Page[FailureEntry]:
        check_tenant(tenant)
        check_page(page)
        before: int | None = None
        if page.cursor:
            try:
                before = int(page.cursor)
            except ValueError:
                raise InvalidArgumentError(
                    FieldViolation("page_token", "not a cursor this server issued")
                ) from None
        rows, last = self._repo.failures_page(tenant, before, page.page_size)
        entries = tuple(FailureEntry(**entry) for _, entry in rows)
        return Page(entries, "" if last is None else str(last))

    def stats(self, tenant: str) -> Stats:
        check_tenant(tenant)
        s = self._repo.stats(tenant)
        return Stats(
            patterns=s.patterns,
            capabilities=s.capabilities,
            intents=s.intents,
            executions=s.executions,
            rejected=s.rejected,
            failures_logged=s.failures_logged,
        )

    def audit_log(self, tenant: str) -> list[dict[str, Any]]:
        """Every retention action and deletion of the tenant, oldest first."""
        check_tenant(tenant)
        return self._repo.audit_log(tenant)

    def tenant_stats(self, tenant: str) -> TenantStats:
        return self._repo.stats(tenant)

    # ---- suggest -----------------------------------------------------------------------------

    def _check_query(self, query: SuggestQuery) -> Vector:
        bad = []
        if not query.intent.strip():
            bad.append(FieldViolation("intent", "must not be empty"))
        if not 1 <= query.k <= self._ranking.max_k:
            bad.append(FieldViolation("k", f"must be between 1 and {self._ranking.max_k}"))
        for name in ("min_match", "min_success"):
            value = getattr(query, name)
            if value is not None and not 0.0 <= value <= 1.0:
                bad.append(FieldViolation(name, "must be between 0 and 1"))
        if bad:
            raise InvalidArgumentError(bad)
        if query.intent_embedding is not None:
            return check_client_vector(
                query.intent_embedding, self._embedder.dim, "intent_embedding"
            )
        return self._embed_one(query.intent)

    def suggest(self, tenant: str, query: SuggestQuery) -> SuggestResult:
        """Hybrid retrieval (vector + lexical, over-fetched), one Candidate per pattern with
        its best semantic and lexical scores, then `ranking.rank` filters, groups and orders."""
        check_tenant(tenant)
        vector = self._check_query(query)
        self._require_ready()
        with self._indexes_lock:
            index = self._indexes.get(tenant)
        if index is None:
            return SuggestResult(())
        limit = self._ranking.fetch_limit(query.k)
        found = retrieve(self._repo, tenant, index, vector, query.intent, limit)
        ranking = self._ranking
        ceiling = score_ceiling(*self._repo.counter_ceilings(tenant), ranking)
        now = self._clock()
        result = rank_lazily(query, found.retrievals, found.load, ranking, now, ceiling)
        return found.complete(result)

    # ---- deletion and retention --------------------------------------------------------------

    def _audit(self, tenant: str, change: Change, entry: dict[str, Any]) -> None:
        change.ops.append(
            self._repo.put_audit(tenant, self._seqs.next(), {**entry, "time_ms": self._clock()})
        )

    def delete_pattern(self, tenant: str, pattern_id: str, reason: str = "manual") -> None:
        check_tenant(tenant)
        found = self._repo.pattern(tenant, pattern_id)
        if found is None:
            raise NotFoundError(f"pattern {pattern_id!r} not found")
        with contextlib.ExitStack() as held:
            held.enter_context(self._pattern_locks.lock_for(tenant, found.code_hash))
            pattern = self._repo.pattern(tenant, pattern_id)
            if pattern is None:
                raise NotFoundError(f"pattern {pattern_id!r} not found")
            capability = self._repo.capability(tenant, pattern.capability_id)
            if capability is not None:
                held.enter_context(
                    self._group_locks.lock_for(tenant, tools_digest(capability.tools))
                )
                capability = self._repo.capability(tenant, pattern.capability_id)
            change = pattern_removal(
                self._repo,
                tenant,
                pattern,
                capability,
                lambda ids: self._oplog(tenant, "remove", ids),
            )
            self._audit(
                tenant, change, {"action": "deleted", "pattern_id": pattern_id, "reason": reason}
            )
            ticket = self._commit(tenant, change)
        await_durable(ticket)

    def delete_capability(self, tenant: str, capability_id: str) -> None:
        check_tenant(tenant)
        capability = self._repo.capability(tenant, capability_id)
        if capability is None:
            raise NotFoundError(f"capability {capability_id!r} not found")
        for pattern_id in capability.pattern_ids:
            with contextlib.suppress(NotFoundError):
                self.delete_pattern(
                    tenant, pattern_id, reason=f"capability {capability_id} deleted"
                )

    def ungroup_pattern(self, tenant: str, pattern_id: str) -> str:
        """Undo a grouping: move the pattern out of its capability into a new one of its own
        (nothing is deleted). Returns the pattern's capability id afterwards."""
        check_tenant(tenant)
        found = self._repo.pattern(tenant, pattern_id)
        if found is None:
            raise NotFoundError(f"pattern {pattern_id!r} not found")
        with contextlib.ExitStack() as held:
            held.enter_context(self._pattern_locks.lock_for(tenant, found.code_hash))
            pattern = self._repo.pattern(tenant, pattern_id)
            capability = self._repo.capability(tenant, pattern.capability_id) if pattern else None
            if pattern is None or capability is None:
                raise NotFoundError(f"pattern {pattern_id!r} not found")
            held.enter_context(self._group_locks.lock_for(tenant, tools_digest(capability.tools)))
            capability = self._repo.capability(tenant, pattern.capability_id)
            if capability is None or capability.pattern_ids == (pattern_id,):
                return pattern.capability_id  # already alone
            now = self._clock()
            alone = CapabilityRecord(
                f"cap_{secrets.token_hex(8)}", capability.tools, (pattern_id,), now
            )
            rest = tuple(p for p in capability.pattern_ids if p != pattern_id)
            change = Change()
            change.ops += [
                *self._repo.put_capability(tenant, replace(capability, pattern_ids=rest)),
                *self._repo.put_capability(tenant, alone),
                self._repo.put_pattern(tenant, replace(pattern, capability_id=alone.id)),
            ]
            change.count("capabilities")
            entry = {"action": "ungrouped", "pattern_id": pattern_id, "from": capability.id}
            self._audit(tenant, change, {**entry, "to": alone.id})
            ticket = self._commit(tenant, change)
        await_durable(ticket)
        return alone.id

    def _set_marks(self, tenant: str, pattern_id: str, flagged: bool, superseded_by: str) -> bool:
        """Rewrite a pattern's retention marks; True when they changed."""
        found = self._repo.pattern(tenant, pattern_id)
        if found is None:
            return False
        with self._pattern_locks.lock_for(tenant, found.code_hash):
            pattern = self._repo.pattern(tenant, pattern_id)
            if pattern is None or (
                pattern.flagged_for_removal == flagged and pattern.superseded_by == superseded_by
            ):
                return False
            change = Change()
            marked = replace(pattern, flagged_for_removal=flagged, superseded_by=superseded_by)
            change.ops.append(self._repo.put_pattern(tenant, marked))
            entry = {"action": "marked", "pattern_id": pattern_id, "flagged": flagged}
            self._audit(tenant, change, {**entry, "superseded_by": superseded_by})
            ticket = self._commit(tenant, change)
        await_durable(ticket)
        return True

    def prune_request_ids(self, tenant: str) -> int:
        """Forget idempotency answers older than `request_id_ttl_days`; returns how many."""
        horizon = self._clock() - int(self._config.request_id_ttl_days * 86_400_000)
        stale = [
            key
            for key, raw in self._repo.request_rows(tenant)
            if json_form.loads(raw).get("time_ms", 0) < horizon
        ]
        for start in range(0, len(stale), 1000):
            self._store.write(
                [self._repo.delete_request(key) for key in stale[start : start + 1000]]
            )
        return len(stale)

    def run_retention(self, tenant: str, apply: bool) -> RetentionReport:
        """Evaluate the retention table; with `apply`, flag, mark superseded, remove (when
        auto-removal is on) and clear marks that no longer hold. Every change is audited."""
        check_tenant(tenant)
        now = self._clock()
        groups = views_by_capability(self._repo, tenant)
        entries = evaluate(groups, self._config.retention, now)
        if apply:
            flagged = {
                e.pattern_id for e in entries if e.action is RetentionAction.REMOVAL_CANDIDATE
            }
            removed = {e.pattern_id for e in entries if e.action is RetentionAction.REMOVED}
            superseded = {
                e.pattern_id: e.superseded_by
                for e in entries
                if e.action is RetentionAction.SUPERSEDED
            }
            self.prune_request_ids(tenant)
            for views in groups.values():
                for view in views:
                    if view.id in removed:
                        with contextlib.suppress(NotFoundError):
                            self.delete_pattern(tenant, view.id, reason="retention")
                    else:
                        self._set_marks(
                            tenant, view.id, view.id in flagged, superseded.get(view.id, "")
                        )
        return RetentionReport(dry_run=not apply, entries=tuple(entries), ran_at_ms=now)
