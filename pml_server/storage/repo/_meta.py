"""The store's own rows: the embedding model it was written with, id allocator marks, tenant
stats and each tenant's vector index snapshot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pml_server.domain.records import TenantStats
from pml_server.storage.keys import CF_META, from_u64, tenant_prefix, u64
from pml_server.storage.seam import KeyValueReads, Op

_MODEL_KEY = b"model_id"
_ALLOCATOR_KEY = b"allocator/"
_STATS_KEY = b"stats/"
_SNAPSHOT_KEY = b"snapshot/"
# Versioned: a store marked by an earlier version of the pass (`placeholders_renamed`: names
# only) runs it once more, for what today's redaction adds (docs/storage.md, Migrations).
_PLACEHOLDERS_KEY = b"placeholders_renamed/19"
# Versioned too: a store marked by an earlier version of the re-key (`tool_names_read`: tool
# names only) runs it once more, for the literals read since (docs/storage.md, Migrations).
_TOOL_NAMES_KEY = b"tool_names_read/3"
# Every pattern's counters hold its shown intents' summary (domain/shown_intents.py).
_INTENTS_SUMMARIZED_KEY = b"intents_summarized/1"
# Every pattern's stored steps are read under the steps rules the key ends with
# (capture/steps.py STEPS_RULES; docs/normalization.md, Steps).
_STEPS_READ_KEY = b"steps_read/"
# A user's deletion whose rows' bytes may still be in the store's files: written with the
# deletion, removed once they are erased; an open erases what one left (docs/storage.md, Data
# left on disk).
_ERASE_PENDING_KEY = b"erase_pending/"


class MetaRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def model_id(self) -> str | None:
        raw = self.store.get(CF_META, _MODEL_KEY)
        return None if raw is None else raw.decode()

    def put_model_id(self, model_id: str) -> Op:
        return (CF_META, _MODEL_KEY, model_id.encode())

    def placeholders_renamed(self) -> bool:
        """Whether every stored pattern's placeholder names, code and secret parameters are
        today's (docs/normalization.md, Placeholder names; docs/capture.md, Secrets)."""
        return self.store.get(CF_META, _PLACEHOLDERS_KEY) is not None

    def put_placeholders_renamed(self) -> Op:
        return (CF_META, _PLACEHOLDERS_KEY, b"1")

    def tool_names_read(self) -> bool:
        """Whether every stored pattern whose code names its tools in an argument is keyed by
        today's hash (docs/normalization.md, Tool calls)."""
        return self.store.get(CF_META, _TOOL_NAMES_KEY) is not None

    def put_tool_names_read(self) -> Op:
        return (CF_META, _TOOL_NAMES_KEY, b"1")

    def intents_summarized(self) -> bool:
        """Whether every stored pattern's counters hold its intent count and shown intents
        (docs/capture.md, The intents a view shows)."""
        return self.store.get(CF_META, _INTENTS_SUMMARIZED_KEY) is not None

    def put_intents_summarized(self) -> Op:
        return (CF_META, _INTENTS_SUMMARIZED_KEY, b"1")

    def steps_read(self, rules: int) -> bool:
        """Whether every stored pattern's steps are stored under the steps rules `rules`
        (docs/normalization.md, Steps)."""
        return self.store.get(CF_META, _STEPS_READ_KEY + str(rules).encode()) is not None

    def put_steps_read(self, rules: int) -> Op:
        return (CF_META, _STEPS_READ_KEY + str(rules).encode(), b"1")

    def allocator_mark(self, name: str) -> int:
        raw = self.store.get(CF_META, _ALLOCATOR_KEY + name.encode())
        return 0 if raw is None else from_u64(raw)

    def put_allocator_mark(self, name: str, mark: int) -> Op:
        return (CF_META, _ALLOCATOR_KEY + name.encode(), u64(mark))

    def stats(self, tenant: str) -> TenantStats:
        raw = self.store.get(CF_META, _STATS_KEY + tenant_prefix(tenant))
        return TenantStats() if raw is None else TenantStats.from_json(raw)

    def put_stats(
        self, tenant: str, stats: TenantStats, deltas: Mapping[str, int] | None = None
    ) -> Op:
        """`stats` as they are after the batch (`deltas`: what the batch added; a shared store
        writes those instead)."""
        return (CF_META, _STATS_KEY + tenant_prefix(tenant), stats.to_json())

    def snapshot(self, tenant: str) -> tuple[int, bytes] | None:
        """(op log sequence the snapshot includes, index bytes) of the tenant's vector index."""
        raw = self.store.get(CF_META, _SNAPSHOT_KEY + tenant_prefix(tenant))
        return None if raw is None else (from_u64(raw[:8]), raw[8:])

    def put_snapshot(self, tenant: str, seq: int, data: bytes) -> Op:
        return (CF_META, _SNAPSHOT_KEY + tenant_prefix(tenant), u64(seq) + data)

    def put_erase_pending(self, deletion: bytes) -> Op:
        return (CF_META, _ERASE_PENDING_KEY + deletion, b"1")

    def erased(self, deletions: Sequence[bytes]) -> list[Op]:
        return [(CF_META, _ERASE_PENDING_KEY + d, None) for d in deletions]

    def erases_pending(self) -> list[bytes]:
        """The deletions whose rows' bytes may still be on disk (read at open)."""
        prefix = _ERASE_PENDING_KEY
        return [key[len(prefix) :] for key, _ in self.store.scan(CF_META, prefix)]
