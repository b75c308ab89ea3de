"""Thresholds of the retention policy; the defaults are the seed's table."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class RetentionConfig:
    # "Success rate < 20% after 10+ tries: consider removal".
    min_tries: int = 10
    min_success_rate: float = 0.2
    # Removed only when this is on; otherwise listed as removal candidates.
    auto_remove: bool = False
    # "Not used in 90+ days: reduce ranking weight" (the ranking's recency applies the weight).
    stale_after_days: float = 90.0
    # Superseded: another pattern of the capability with at least superseded_min_tries tries and
    # a success estimate higher by at least superseded_margin. The estimate uses the same Beta
    # prior as the ranking (keep both in step).
    superseded_min_tries: int = 10
    superseded_margin: float = 0.15
    prior_successes: float = 1.0
    prior_failures: float = 1.0
    # How often the engine runs the background job.
    interval_seconds: float = 3600.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"RetentionConfig.{f.name} must be finite, got {value!r}")
        if not 0.0 <= self.min_success_rate <= 1.0:
            raise ValueError("RetentionConfig.min_success_rate must be in [0, 1]")
        if not 0.0 <= self.superseded_margin <= 1.0:
            raise ValueError("RetentionConfig.superseded_margin must be in [0, 1]")
        for name in ("min_tries", "superseded_min_tries"):
            if getattr(self, name) < 1:
                raise ValueError(f"RetentionConfig.{name} must be >= 1")
        for name in ("stale_after_days", "prior_successes", "prior_failures"):
            if getattr(self, name) < 0:
                raise ValueError(f"RetentionConfig.{name} must be >= 0")
        if self.prior_successes + self.prior_failures <= 0:
            raise ValueError("RetentionConfig.prior_successes + prior_failures must be > 0")
        if self.interval_seconds <= 0:
            raise ValueError("RetentionConfig.interval_seconds must be > 0")
        # the job's thread waits this long: a longer wait killed it with an OverflowError
        if self.interval_seconds > threading.TIMEOUT_MAX:
            raise ValueError(
                f"RetentionConfig.interval_seconds must be at most {threading.TIMEOUT_MAX:g}"
            )
