"""The retention table, row by row, with the clock passed in (now_ms)."""

from __future__ import annotations

import pytest

from pml_server.domain.model import PatternView, RetentionAction, RetentionEntry
from pml_server.ranking import DAY_MS
from pml_server.retention import RetentionConfig, evaluate
from tests.support import NOW_MS, pattern

CONFIG = RetentionConfig()


def actions(entries: list[RetentionEntry]) -> list[tuple[str, RetentionAction, str]]:
    return [(e.pattern_id, e.action, e.superseded_by) for e in entries]


def one(p: PatternView, config: RetentionConfig = CONFIG, now_ms: int = NOW_MS) -> list:
    return actions(evaluate({p.capability_id: [p]}, config, now_ms))


# Row 1: success rate < 20% after 10 or more tries: removal candidate.
@pytest.mark.parametrize(
    ("successes", "failures", "flagged"),
    [
        (1, 9, True),  # 10% of 10
        (0, 10, True),  # 0% of 10
        (1, 8, False),  # 9 tries: too few to judge
        (2, 8, False),  # exactly 20%: not below
        (19, 81, True),  # 19% of 100
        (0, 1, False),  # one failure in one try
    ],
)
def test_low_success_after_enough_tries_is_a_removal_candidate(
    successes: int, failures: int, flagged: bool
) -> None:
    got = one(pattern("p", successes=successes, failures=failures))
    expected = [("p", RetentionAction.REMOVAL_CANDIDATE, "")] if flagged else []
    assert got == expected


def test_removed_only_when_auto_remove_is_on() -> None:
    p = pattern("p", successes=1, failures=9)
    assert one(p, RetentionConfig(auto_remove=True)) == [("p", RetentionAction.REMOVED, "")]
    (entry,) = evaluate({"c": [p]}, CONFIG, NOW_MS)
    assert "10%" in entry.reason
    assert "10 tries" in entry.reason


def test_removal_thresholds_are_configurable() -> None:
    p = pattern("p", successes=2, failures=3)
    assert one(p) == []
    strict = RetentionConfig(min_tries=5, min_success_rate=0.5)
    assert one(p, strict) == [("p", RetentionAction.REMOVAL_CANDIDATE, "")]


# Row 2: not used in 90+ days: reported stale (the ranking lowers its weight).
@pytest.mark.parametrize(("days", "stale"), [(0, False), (89.9, False), (90, True), (400, True)])
def test_unused_for_90_days_or_more_is_stale(days: float, stale: bool) -> None:
    got = one(pattern("p", successes=5, days_unused=days))
    assert got == ([("p", RetentionAction.STALE, "")] if stale else [])


def test_stale_follows_the_clock() -> None:
    p = pattern("p", successes=5)
    assert one(p, now_ms=NOW_MS + 89 * DAY_MS) == []
    assert one(p, now_ms=NOW_MS + 90 * DAY_MS) == [("p", RetentionAction.STALE, "")]
    assert one(p, RetentionConfig(stale_after_days=30), NOW_MS + 30 * DAY_MS) != []


# Row 3: superseded within a capability: kept, deprioritized, says by which.
def test_clearly_beaten_pattern_is_superseded_by_the_best() -> None:
    best = pattern("best", capability_id="c", successes=19, failures=1)  # 0.91
    weak = pattern("weak", capability_id="c", successes=3, failures=2)  # 0.57
    close = pattern("close", capability_id="c", successes=8, failures=1)  # 0.82: within margin
    got = actions(evaluate({"c": [weak, best, close]}, CONFIG, NOW_MS))
    assert got == [("weak", RetentionAction.SUPERSEDED, "best")]


def test_superseding_needs_enough_uses() -> None:
    lucky = pattern("lucky", capability_id="c", successes=9)  # 0.91 but only 9 tries
    weak = pattern("weak", capability_id="c", successes=3, failures=2)
    assert evaluate({"c": [lucky, weak]}, CONFIG, NOW_MS) == []


def test_superseding_never_crosses_capabilities() -> None:
    best = pattern("best", capability_id="a", successes=50)
    weak = pattern("weak", capability_id="b", successes=3, failures=2)
    assert evaluate({"a": [best], "b": [weak]}, CONFIG, NOW_MS) == []


def test_no_chains_every_superseded_pattern_names_the_best() -> None:
    pats = [
        pattern("a", capability_id="c", successes=99, failures=1),
        pattern("b", capability_id="c", successes=60, failures=20),
        pattern("d", capability_id="c", successes=10, failures=20),
    ]
    got = actions(evaluate({"c": pats}, CONFIG, NOW_MS))
    assert got == [
        ("b", RetentionAction.SUPERSEDED, "a"),
        ("d", RetentionAction.SUPERSEDED, "a"),
    ]


def test_a_pattern_can_be_stale_removal_candidate_and_superseded_at_once() -> None:
    best = pattern("best", capability_id="c", successes=30)
    bad = pattern("bad", capability_id="c", successes=1, failures=19, days_unused=120)
    got = actions(evaluate({"c": [best, bad]}, CONFIG, NOW_MS))
    assert got == [
        ("bad", RetentionAction.REMOVAL_CANDIDATE, ""),
        ("bad", RetentionAction.STALE, ""),
        ("bad", RetentionAction.SUPERSEDED, "best"),
    ]


def test_healthy_patterns_give_no_entry_and_order_is_deterministic() -> None:
    caps = {
        "z": [pattern("z1", capability_id="z", successes=1, failures=9)],
        "a": [
            pattern("a1", capability_id="a", successes=1, failures=9),
            pattern("a0", capability_id="a"),
        ],
    }
    assert [e.pattern_id for e in evaluate(caps, CONFIG, NOW_MS)] == ["a1", "z1"]
    assert evaluate({}, CONFIG, NOW_MS) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_tries": 0},
        {"min_success_rate": 1.5},
        {"stale_after_days": -1.0},
        {"interval_seconds": 0.0},
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RetentionConfig"):
        RetentionConfig(**kwargs)  # type: ignore[arg-type]
