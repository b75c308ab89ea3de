"""The retention policy (seed table): removal candidates, stale and superseded patterns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pml_server.retention.config import RetentionConfig

if TYPE_CHECKING:
    from pml_server.retention.policy import evaluate, removal_holds, supersede_holds

__all__ = ["RetentionConfig", "evaluate", "removal_holds", "supersede_holds"]


def __getattr__(name: str) -> object:
    # `evaluate` on first use (PEP 562): the client commands import RetentionConfig (through
    # pml_server.config) and need not import the policy, the domain model and the ranking.
    if name in ("evaluate", "removal_holds", "supersede_holds"):
        from pml_server.retention import policy

        return getattr(policy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
