"""The companion's tool profiles at work on one request (docs/ranking.md, Other languages,
"Tool profiles in the companion's space"), shared by the forward and the reverse tests."""

from __future__ import annotations

from pathlib import Path

from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig
from testing.ranking_oracle import path as oracle
from tests.support import make_record, open_engine


def assert_profiles_move_the_step_factor(
    tmp_path: Path, memory: list[tuple[str, list[str]]], text: str
) -> None:
    """On engines holding `memory`, `text`'s answer is the oracle's with the tool profiles on
    and off, the step gate opens, and the profiles change some shared candidate's step factor."""
    answers = []
    for weight in (0.8, 0.0):
        engine = open_engine(
            tmp_path / str(weight),
            embedder="minilm",
            ranking=RankingConfig(step_profile_weight=weight),
        )
        try:
            for n, (intent, tools) in enumerate(memory):
                engine.record("t", make_record(f"s{n}", intent, tools))
            assert engine.admin.wait_cross_lingual(60)
            query = SuggestQuery(text, k=5, explain=True, min_match=0.0, plan_size=0)
            got = engine.suggest("t", query)
            assert got == oracle.rank_suggestions(engine._state, "t", query)
            answers.append({s.pattern.intents[0].text: s.score.steps for s in got.suggestions})
        finally:
            engine.close()
    with_profiles, without = answers
    assert any(steps < 1.0 for steps in with_profiles.values()), "the step gate opened"
    shared = with_profiles.keys() & without.keys()
    assert any(abs(with_profiles[p] - without[p]) > 1e-6 for p in shared), (answers,)
