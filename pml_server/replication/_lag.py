"""The follower lag, as metrics and benches read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FollowerLag:
    """Commit-to-applied delay of recent op log entries written by any replica, in seconds
    (entries this replica wrote count too: they show the follower's own delay)."""

    applied: int
    p50: float
    p99: float
    behind: int  # entries committed but not yet applied, at the last poll
    rebuilds: int = 0  # tenants rebuilt from the store after a gap in the op log
    errors: int = 0  # catch-ups that failed (the database gone, an entry it cannot read)
    # why the follower no longer applies the op log (an error not the database's), else None
    stalled: str | None = None
