"""The rank-scale bench (benches/profile/rank_scale.py) at a tiny size: its in-process tenant state
ranks the workload's own executions first and every part is timed. Shapes only, never a timing."""

from __future__ import annotations

import math
from pathlib import Path

from benches.harness import service_workload as work
from benches.profile import rank_scale
from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig, RankRequest, resolve_settings

SIZE = 600


def test_the_state_ranks_each_execution_first_for_its_own_intent(tmp_path: Path) -> None:
    index, times = rank_scale.build(SIZE, tmp_path)
    assert times["vectors inserted"] >= 0
    assert (tmp_path / f"hnsw-{SIZE}.bin").exists()
    assert (len(index.ann), len(index.lexical), len(index.ranks)) == (SIZE, SIZE, SIZE)
    config = RankingConfig()
    settings = resolve_settings(SuggestQuery(intent="", k=rank_scale.K), config)
    vectors = work.stored_vectors(SIZE)
    for i in (0, 17, SIZE - 1):
        request = RankRequest(
            vectors[i], work.intent_text(i), 40, rank_scale.K, settings, config, rank_scale.NOW_MS
        )
        ranked = index.rank(request)
        assert len(ranked) == rank_scale.K
        assert index.intents_of(ranked[0].pattern_id) == [i + 1]
    # a second build loads the cached vector index instead of inserting
    again, times = rank_scale.build(SIZE, tmp_path)
    assert "vectors loaded" in times
    assert len(again.ann) == SIZE


def test_every_part_is_timed_for_every_query() -> None:
    index, _ = rank_scale.build(SIZE, None)
    parts = rank_scale.profile(index, 5)
    assert set(parts) == {
        "hnsw",
        "bm25",
        "exact cosines",
        "core rank",
        "python rank",
        "merge + table",
        "python around",
    }
    for name, seconds in parts.items():
        assert len(seconds) == 5, name
        assert all(math.isfinite(s) for s in seconds), name
        if name not in ("merge + table", "python around"):  # differences may dip below 0
            assert all(s >= 0 for s in seconds), name
