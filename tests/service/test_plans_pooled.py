"""Plans with the default model (docs/ranking.md, Plans, "Part vectors"): the parts' vectors
are pooled from the request's one model run, and the request's suggestions are those it gets
with plans off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pml_server.domain.model import SuggestQuery, SuggestResult
from pml_server.service import Engine
from tests.support import make_record, open_engine

STORED = [
    ("search for a movie by its title", ["search_movie"]),
    ("list the cast and crew credits of a movie", ["get_movie_credit"]),
    ("send an email message to a colleague", ["send_email"]),
    ("read a json file from the disk", ["read_file"]),
    ("convert a temperature from celsius to fahrenheit", ["convert_temperature"]),
]
COMPOSE = (
    "Search for the movie Mulholland Drive by its title. "
    "Then send an email message to my colleague with the result."
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = open_engine(Path(tmp_path_factory.mktemp("pooled")), embedder="minilm")
    for n, (intent, tools) in enumerate(STORED):
        engine.record("t", make_record(f"r{n}", intent, tools))
    yield engine
    engine.close()


def _ranked(result: SuggestResult) -> list[tuple[str, float]]:
    return [(s.capability_id, s.score.total) for s in result.suggestions]


def test_one_model_run_and_the_same_suggestions(engine: Engine) -> None:
    before = engine.embedding_usage()
    on = engine.suggest("t", SuggestQuery(COMPOSE, k=5))
    runs = engine.embedding_usage().runs - before.runs
    assert runs == 1  # the request alone: its parts are pooled from that run
    off = engine.suggest("t", SuggestQuery(COMPOSE, k=5, plan_size=0))
    assert _ranked(on) == _ranked(off)
    assert on.plans
    assert [p.tools for p in on.plans[0].parts] == [("search_movie",), ("send_email",)]
    # asked again: the pooled run is cached like a vector, the model is not run
    before = engine.embedding_usage()
    again = engine.suggest("t", SuggestQuery(COMPOSE, k=5))
    assert engine.embedding_usage().runs == before.runs
    assert again.plans == on.plans


def test_a_client_vector_keeps_its_suggestions(engine: Engine) -> None:
    vector = np.full(384, 1.0 / 384**0.5, dtype=np.float32)
    query = SuggestQuery(COMPOSE + " Thanks", k=5, intent_embedding=tuple(vector.tolist()))
    on = engine.suggest("t", query)
    off = engine.suggest(
        "t", SuggestQuery(query.intent, 5, intent_embedding=query.intent_embedding, plan_size=0)
    )
    assert _ranked(on) == _ranked(off)
