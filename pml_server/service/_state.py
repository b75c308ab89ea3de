"""What every part of the engine shares: the store and its repository, the embedder, the
search indexes, the striped locks (taken in one order, see `service/_capture.py`), the id
allocators, readiness, and the settings derived from the configuration."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pml_server.capture.dedup import DEFAULT_THRESHOLDS, SimilarityThresholds
from pml_server.capture.locks import KeyedLocks
from pml_server.capture.normalize import NormalizedCode
from pml_server.capture.rules import CaptureLimits
from pml_server.config import EngineConfig
from pml_server.domain.errors import FieldViolation, InvalidArgumentError, UnavailableError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import CaptureResult, ExecutionRecord
from pml_server.domain.records import IntentRecord, TenantStats
from pml_server.domain.vectors import Vector
from pml_server.embedding import CachedEmbedder
from pml_server.embedding.base import Embedder
from pml_server.ranking import RankingConfig, default_ranking
from pml_server.search import TenantIndexes
from pml_server.service._call_groups import CallGroups
from pml_server.service._companion import CompanionFiller
from pml_server.service._restore import rebuilt_index
from pml_server.service._suggest_core import fill_rank_tables
from pml_server.service._views import ViewCache
from pml_server.storage import StoreBackend, repository_for
from pml_server.storage.seam import IdAllocator
from pml_server.storage.seam import Locks as SeamLocks

if TYPE_CHECKING:
    from pml_server.replication import OplogFollower

Clock = Callable[[], int]
Normalizer = Callable[[str, str], NormalizedCode]
IndexAdd = tuple[IntentRecord, tuple[str, ...]]

# Unary captures in flight at once (`_capture.record`; more callers queue and are captured
# together): two, so that while one batch waits for the disk or runs Python the other keeps
# the model's two cores busy.
CAPTURE_SLOTS = 2


@dataclass
class Locks:
    """Striped locks, always taken in this order: request id (idempotency), code hash (a
    pattern's counters), tool signature (capability grouping, only when a capture creates a
    pattern), session and transition (a successful capture with a session id), tenant (stats
    and failure log). With a shared store the pattern, group and tenant locks also lock other
    replicas out (database advisory locks, `StoreBackend.locks`); request ids are made
    exactly-once by the store itself and tenant counts are SQL deltas, so a shared store's
    commit takes the tenant lock only to log or erase failures (docs/storage.md, The failure
    log on a shared store)."""

    pattern: SeamLocks
    group: SeamLocks
    # After the group lock, in this order: a session's last step, then one transition's count
    # (docs/ranking.md, Sessions; `_sessions.follow`).
    session: SeamLocks
    transition: SeamLocks
    tenant: SeamLocks
    request: KeyedLocks = field(default_factory=KeyedLocks)


class Readiness:
    """False until the indexes have caught up with the store (or their restore failed)."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._load_error: BaseException | None = None

    def set_ready(self) -> None:
        self._ready.set()

    def set_failed(self, error: BaseException) -> None:
        self._load_error = error
        self._ready.set()

    def clear(self) -> None:
        self._ready.clear()

    def wait(self, timeout: float | None = None) -> bool:
        self._ready.wait(timeout)
        if self._load_error is not None:
            raise self._load_error
        return self._ready.is_set()

    def is_ready(self) -> bool:
        return self._ready.is_set() and self._load_error is None

    def require(self) -> None:
        if not self.is_ready():
            raise UnavailableError("the search index is still catching up with the store")


@dataclass(frozen=True)
class CaptureRules:
    """The settings a capture is checked and matched by: the similarity thresholds, the field
    limits, and the code normalizer."""

    thresholds: SimilarityThresholds
    limits: CaptureLimits
    normalizer: Normalizer


@dataclass(frozen=True)
class IdAllocators:
    """Intent ids, and the sequence numbers of the failure, op and audit logs."""

    intent: IdAllocator
    seq: IdAllocator


class SessionStarts:
    """Sessions each tenant started in this process since its last sweep (`_sessions`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[str, int] = {}

    def started(self, tenant: str) -> None:
        with self._lock:
            self._started[tenant] = self._started.get(tenant, 0) + 1

    def sweep_due(self, tenant: str, every: int) -> bool:
        """Whether `every` sessions started since the last sweep; if so, counting restarts."""
        with self._lock:
            if self._started.get(tenant, 0) < every:
                return False
            self._started[tenant] = 0
            return True


@dataclass
class CaptureBatching:
    """Concurrent unary captures of one tenant, grouped into `record_many` batches (`groups`),
    and the index additions of the batch this thread is capturing, if any (`staged_adds`)."""

    groups: CallGroups[str, tuple[ExecutionRecord, Vector | None], CaptureResult]
    staged_adds: threading.local = field(default_factory=threading.local)


class EngineState:
    def __init__(
        self,
        config: EngineConfig,
        store: StoreBackend,
        embedder: Embedder | CachedEmbedder,
        clock: Clock,
        normalizer: Normalizer,
        companion: CachedEmbedder | None = None,
    ) -> None:
        self.config = config
        self.repo = repository_for(store, config.view_cache_size)
        self.embedder = embedder
        # the cross-lingual companion model's filler, or None (service/_companion.py)
        self.companion_filler = CompanionFiller(companion) if companion is not None else None
        self.clock = clock
        defaults = DEFAULT_THRESHOLDS[embedder.family]
        duplicate, group = config.intent_duplicate_threshold, config.capability_group_threshold
        self.rules = CaptureRules(
            thresholds=SimilarityThresholds(  # None: the calibrated value (0 is a threshold)
                intent_duplicate=defaults.intent_duplicate if duplicate is None else duplicate,
                capability_group=defaults.capability_group if group is None else group,
            ),
            limits=CaptureLimits(
                fields=config.limits, recent_values_per_param=config.recent_values_per_param
            ),
            normalizer=normalizer,
        )
        self.locks = Locks(
            pattern=store.locks("pattern", 1024),
            group=store.locks("group", 256),
            session=store.locks("session", 256),
            transition=store.locks("transition", 256),
            tenant=store.locks("tenant", 64),
        )
        self.new_sessions = SessionStarts()
        # Each tenant's stats as this engine last submitted them. Only `_writes.commit` writes
        # stats, under the tenant's lock, so this is what the store (with its write overlay)
        # would answer: every capture skips a read and a JSON decode. Set only once a submit
        # was accepted; after a failed write the store refuses every later one.
        self.submitted_stats: dict[str, TenantStats] = {}
        self.ids = IdAllocators(intent=store.allocator("intent"), seq=store.allocator("seq"))
        self.indexes = TenantIndexes(
            config.vector_index, embedder.dim, companion.dim if companion is not None else 0
        )
        self.batching = CaptureBatching(CallGroups(CAPTURE_SLOTS, LIMITS.capture_batch.bound))
        self.readiness = Readiness()
        # The views Suggest showed lately (`_views`): only where this process alone writes.
        self.views: ViewCache | None = None if store.shared else ViewCache()
        # With a shared store, other replicas write too: their op log entries are followed
        # into this replica's indexes (pml_server/replication).
        self.follower: OplogFollower | None = None
        if store.shared:
            from pml_server.replication import follower_for

            self.follower = follower_for(
                store, self.repo, self.indexes.for_tenant, self.rebuild_indexes
            )

    def rebuild_indexes(self, tenant: str) -> None:
        """Rebuild the tenant's indexes (vectors, lexical, ranking table) from the store and
        install them, as at open (`_restore`, `fill_rank_tables`)."""
        index = rebuilt_index(
            self.repo, tenant, self.indexes.kind, self.indexes.dim, self.indexes.companion_dim
        )
        fill_rank_tables(self.repo, {tenant: index})
        self.indexes.replace(tenant, index)

    @property
    def store(self) -> StoreBackend:
        return self.repo.store

    @functools.cached_property
    def ranking(self) -> RankingConfig:
        """The configured ranking settings, else the embedder's defaults."""
        config = self.config
        return config.ranking if config.ranking is not None else default_ranking(config.embedder)

    @property
    def companion(self) -> CachedEmbedder | None:
        """The cross-lingual companion model (service/_companion.py), or None."""
        return self.companion_filler.companion if self.companion_filler is not None else None

    def embed_one(self, text: str) -> Vector:
        vector: Vector = self.embedder.embed([text])[0]
        if not usable(vector):
            raise no_words_error()
        return vector


def usable(vector: Vector) -> bool:
    """A zero vector (e.g. the hashing embedder finds no word in "{") has no direction, and
    the index refuses it (at capture after the write, and at every restart)."""
    return bool(np.isfinite(vector).all() and np.any(vector))


def no_words_error() -> InvalidArgumentError:
    return InvalidArgumentError(
        FieldViolation("intent", "has no words the embedding model can use")
    )
