"""Shared benchmark plumbing: every figure is a ratio against a baseline run in the same process."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    """One line of the results table.

    `value` is ours, `baseline` the reference measured in the same run, `ratio` = value/baseline
    (higher is better unless `lower_is_better`), `target` the ratio the issue asks for.
    """

    suite: str
    metric: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: float | None = None
    lower_is_better: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.value / self.baseline  # type: ignore[operator]

    @property
    def met(self) -> bool | None:
        ratio = self.ratio
        if ratio is None or self.target is None:
            return None
        return ratio <= self.target if self.lower_is_better else ratio >= self.target

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Fastest wall time of `repeats` runs of `fn`, in seconds (the least noisy estimate)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
