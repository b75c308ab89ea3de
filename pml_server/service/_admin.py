"""What an operator, the server's signal handlers and metrics, tests and benches call on the
engine beyond the API's `EngineProtocol` (`Engine.admin`): readiness, index snapshots, backups,
the follower's lag, the cross-lingual filler, the audit log and tenant counts, ungrouping, and
pruning idempotency answers."""

from __future__ import annotations

from typing import Any

from pml_server.backup import BackupStatus
from pml_server.domain.records import TenantStats
from pml_server.replication import FollowerLag
from pml_server.service import _curation, _idempotency, _reads
from pml_server.service._jobs import BackgroundJobs, write_snapshots
from pml_server.service._state import EngineState
from pml_server.storage import StoreBackend


class EngineAdmin:
    def __init__(self, state: EngineState, jobs: BackgroundJobs) -> None:
        self._state = state
        self._jobs = jobs

    @property
    def store(self) -> StoreBackend:
        """The store (for state kept beside the engine's: held OTLP spans)."""
        return self._state.store

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._state.readiness.wait(timeout)

    def snapshot_indexes(self) -> None:
        """Persist every tenant's vector index (the op log is kept: see `write_snapshots`)."""
        if self._state.readiness.is_ready():
            write_snapshots(self._state, trim_oplog=False)

    def request_backup(self) -> bool:
        """Take a backup into `backup_dir` now, on the backup job's thread (SIGUSR2); False
        when no backup_dir is configured. Safe from a signal handler (`BackupJob.request`)."""
        backups = self._jobs.backups
        if backups is None:
            return False
        backups.request()
        return True

    def backup_status(self) -> BackupStatus | None:
        """Backups taken and failed so far (None: no backup_dir)."""
        backups = self._jobs.backups
        return backups.status() if backups is not None else None

    def follower_lag(self) -> FollowerLag | None:
        """How far behind the other replicas' writes this replica's indexes are (None: the
        store is not shared)."""
        follower = self._state.follower
        return follower.lag() if follower is not None else None

    def wait_cross_lingual(self, timeout: float | None = None) -> bool:
        """Until the companion's thread has filled what was asked of it (tests, benches)."""
        filler = self._state.companion_filler
        return filler is None or filler.wait_idle(timeout)

    def wait_placeholders_renamed(self, timeout: float | None = None) -> int:
        """Until the open's renaming of an older build's placeholder names is over (tests,
        benches): how many patterns it rewrote; raises what made it fail (the next open
        retries). docs/normalization.md, Placeholder names."""
        return self._jobs.placeholders.wait(timeout)

    def wait_free_text_redacted(self, timeout: float | None = None) -> int:
        """Until the open's redacting of an older build's free texts by today's rules is over
        (tests, benches): how many rows it rewrote; raises what made it fail (the next open
        retries). docs/storage.md, Migrations."""
        return self._jobs.free_texts.wait(timeout)

    def wait_intents_summarized(self, timeout: float | None = None) -> int:
        """Until the open's summarizing of an older build's counters is over (tests,
        benches): how many it rewrote; raises what made it fail (the next open retries).
        docs/capture.md, The intents a view shows."""
        return self._jobs.summaries.wait(timeout)

    def wait_steps_read(self, timeout: float | None = None) -> int:
        """Until the open's storing of the steps of patterns stored under other steps rules is
        over (tests, benches): how many it rewrote; raises what made it fail (the next open
        retries). docs/normalization.md, Steps."""
        return self._jobs.steps.wait(timeout)

    def audit_log(self, tenant: str) -> list[dict[str, Any]]:
        """Every retention action and deletion of the tenant, oldest first."""
        return _reads.audit_log(self._state.repo, tenant)

    def tenant_stats(self, tenant: str) -> TenantStats:
        return self._state.repo.meta.stats(tenant)

    def ungroup_pattern(self, tenant: str, pattern_id: str) -> str:
        """Move the pattern into a capability of its own; returns that capability's id."""
        return _curation.ungroup_pattern(self._state, tenant, pattern_id)

    def prune_request_ids(self, tenant: str) -> int:
        """Forget idempotency answers older than `request_id_ttl_days`; returns how many."""
        return _idempotency.prune_request_ids(self._state, tenant)
