"""What one capture or deletion writes (with its failure log entries), and waiting for that
write to become durable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pml_server.capture.records import IntentRecord, PatternCounters, PatternRecord
from pml_server.capture.rules import tool_failures
from pml_server.domain.errors import UnavailableError
from pml_server.domain.model import ExecutionRecord, ToolFailure
from pml_server.storage.rocks import Op, StoreClosedError, WriteTicket


@dataclass
class Change:
    """What one capture or deletion changes besides its own ops: tenant stats deltas, failure
    log entries, and in-memory index updates to apply once the batch is submitted."""

    ops: list[Op] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    index_adds: list[tuple[IntentRecord, tuple[str, ...]]] = field(default_factory=list)
    index_removes: list[int] = field(default_factory=list)
    # The ranking table's updates (`TenantSearchIndex.ranks`): pattern records and counters
    # written, patterns deleted.
    rank_patterns: list[PatternRecord] = field(default_factory=list)
    rank_counters: list[tuple[str, PatternCounters]] = field(default_factory=list)
    rank_removes: list[str] = field(default_factory=list)

    def put_counters(self, op: Op, pattern_id: str, counters: PatternCounters) -> None:
        """A counters write and the ranking table's update that goes with it."""
        self.ops.append(op)
        self.rank_counters.append((pattern_id, counters))

    def put_pattern(self, op: Op, record: PatternRecord) -> None:
        """A pattern record write and the ranking table's update that goes with it."""
        self.ops.append(op)
        self.rank_patterns.append(record)

    def ranks_changed(self) -> bool:
        return bool(self.rank_patterns or self.rank_counters or self.rank_removes)

    def count(self, name: str, delta: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + delta


def await_durable(ticket: WriteTicket) -> None:
    """Wait until the write is durable; a store that failed or closed meanwhile is UNAVAILABLE
    (the capture may be retried with the same request id)."""
    try:
        ticket.wait()
    except StoreClosedError as error:
        raise UnavailableError(f"the write was not committed: {error}") from error


def failure_entries(
    record: ExecutionRecord, code_hash: str, pattern_id: str, now: int
) -> list[dict[str, Any]]:
    """The failure log entries of a failed run: one per failing tool (or one for the run)."""
    failures = tool_failures(record) or (ToolFailure("", "execution failed"),)
    return [
        {
            "request_id": record.request_id,
            "tool": f.tool,
            "error": f.error,
            "intent": record.intent,
            "code_hash": code_hash,
            "pattern_id": pattern_id,
            "time_ms": now,
        }
        for f in failures
    ]
