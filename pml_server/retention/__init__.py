"""The retention policy (seed table): removal candidates, stale and superseded patterns."""

from __future__ import annotations

from pml_server.retention.config import RetentionConfig
from pml_server.retention.policy import evaluate

__all__ = ["RetentionConfig", "evaluate"]
