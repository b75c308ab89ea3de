"""What a request in another language brings to the ranking besides its vector: its parts
(`ranking.other_languages`) and the coverage weight they get (`service._companion`;
docs/ranking.md, Other languages, "Request parts in other languages")."""

from __future__ import annotations

import numpy as np

from pml_server.embedding import make_embedder
from pml_server.ranking import RankingConfig
from pml_server.service import _companion


def test_a_chinese_request_is_embedded_part_by_part() -> None:
    companion = make_embedder("hashing")
    text = "我想了解可再生能源技术的最新进展。你能找些相关的研究论文，再推荐一些工作机会吗？"
    parts = _companion.request_parts(companion, text)
    assert parts is not None
    expected = companion.embed(
        ["我想了解可再生能源技术的最新进展。", "你能找些相关的研究论文", "再推荐一些工作机会吗？"]
    )
    assert len(parts.vectors) == 3
    for got, want in zip(parts.vectors, expected, strict=True):
        np.testing.assert_allclose(got, want)
    assert tuple(parts.weights) == (1.0, 1.0, 1.0)


def test_an_english_request_over_other_intents_is_cut_by_the_english_splitter() -> None:
    companion = make_embedder("hashing")
    parts = _companion.request_parts(
        companion, "Find recent papers on climate change, then suggest some job openings."
    )
    assert parts is not None
    assert len(parts.vectors) == 2
    assert _companion.request_parts(companion, "Trouve des restaurants à Dallas.") is None


def test_a_request_in_another_language_weighs_its_parts_more_never_less() -> None:
    floor = _companion.OTHER_LANGUAGE_COVERAGE_WEIGHT
    default = _companion.other_language_ranking(RankingConfig())
    assert default.step_coverage_weight == floor
    assert default.lexical_weight <= _companion.OTHER_LANGUAGE_LEXICAL_WEIGHT
    higher = RankingConfig(step_coverage_weight=min(1.0, floor + 0.1))
    assert _companion.other_language_ranking(higher).step_coverage_weight == (
        higher.step_coverage_weight
    )
    # a tenant that turned the coverage off keeps it off
    off = RankingConfig(step_coverage_weight=0.0)
    assert _companion.other_language_ranking(off).step_coverage_weight == 0.0
