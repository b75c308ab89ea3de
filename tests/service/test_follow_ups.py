"""Follow-up requests (docs/ranking.md, Sessions, "Follow-up requests"): a request that says too
little alone ("what about 50 GBP?") is read again with the agent's previous step, and that
reading answers only when its first suggestion matches clearly better than the request's own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pml_server.domain.model import SuggestContext, SuggestQuery, SuggestResult
from pml_server.ranking import RankingConfig
from pml_server.ranking.config import default_ranking
from pml_server.service import Engine
from tests.support import count_calls, make_record, open_engine

T = "t"
MEMORY = (
    ("convert 100 USD to EUR", ["convert_currency"]),
    ("convert 20 euros into yen", ["convert_currency"]),
    ("weather forecast for London", ["get_weather"]),
    ("book a hotel room in Rome", ["book_hotel"]),
)


def _engine(where: Path, embedder: str = "hashing", weight: float | None = None) -> Engine:
    ranking = default_ranking(embedder)
    # the hashing family reads follow-ups alone by default: asked here for its mechanics
    ranking = replace(ranking, follow_up_weight=1.0 if weight is None else weight)
    engine = open_engine(where, embedder=embedder, ranking=ranking)
    for n, (intent, tools) in enumerate(MEMORY):
        engine.record(T, replace(make_record(f"m{n}", intent, tools), session_id=f"s{n}"))
    return engine


def _stored(engine: Engine, n: int) -> tuple[str, str]:
    """(capability, pattern) of MEMORY[n] (recording it again only counts a use)."""
    intent, tools = MEMORY[n]
    result = engine.record(T, make_record(f"again{n}", intent, tools))
    return result.capability_id, result.pattern_id


def _tools(engine: Engine, result: SuggestResult) -> list[tuple[str, ...]]:
    return [engine.get_capability(T, s.capability_id).tools for s in result.suggestions]


def _ask(text: str, **context: object) -> SuggestQuery:
    return SuggestQuery(text, context=SuggestContext(**context) if context else None)  # type: ignore[arg-type]


def test_a_request_that_says_too_little_is_read_with_the_previous_step(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "read")
    alone = _engine(tmp_path / "alone", weight=0.0)
    try:
        follow_up = "what about 50 GBP?"
        # alone it names nothing the memory holds: nothing passes `min_match`
        assert engine.suggest(T, _ask(follow_up)).suggestions == ()
        assert alone.suggest(T, _ask(follow_up, previous_tools=("convert_currency",))) == (
            SuggestResult(())
        )
        convert, pattern = _stored(engine, 1)
        # every way of naming the previous step: its tools, its pattern, its session
        for context in (
            {"previous_tools": ("convert_currency",)},
            {"previous_patterns": (f"patterns/{pattern}",)},
            {"session_id": "s1"},
        ):
            got = engine.suggest(T, _ask(follow_up, **context))
            assert [s.capability_id for s in got.suggestions][:1] == [convert], context
            assert got.plans == ()
            assert got.read_as_follow_up
        # the same words after another step read as that step's follow-up
        hotel = engine.suggest(T, _ask("and for two nights?", previous_tools=("book_hotel",)))
        assert _tools(engine, hotel)[:1] == [("book_hotel",)]
    finally:
        engine.close()
        alone.close()


def test_a_request_that_says_enough_keeps_its_own_answer(tmp_path: Path) -> None:
    """A whole request after an unrelated step is answered as if read alone, score for score:
    the reading with the step does not match it clearly better."""
    engine = _engine(tmp_path / "read")
    alone = _engine(tmp_path / "alone", weight=0.0)
    try:
        for text, previous in (
            ("weather forecast for Paris", "convert_currency"),
            ("book a hotel room in Madrid", "get_weather"),
            ("convert 100 USD to GBP", "book_hotel"),
        ):
            query = _ask(text, previous_tools=(previous,))
            got, own = engine.suggest(T, query), alone.suggest(T, query)
            # (capability ids are random: each engine's own)
            assert _tools(engine, got) == _tools(alone, own)
            assert [s.score for s in got.suggestions] == [s.score for s in own.suggestions]
            assert _tools(engine, got)[0] != (previous,)
            assert not got.read_as_follow_up
        # a previous step whose tool the memory never ran has no place to read the request in
        unknown = _ask("what about 50 GBP?", previous_tools=("send_email",))
        assert engine.suggest(T, unknown).suggestions == ()
        assert alone.suggest(T, unknown).suggestions == ()
    finally:
        engine.close()
        alone.close()


def test_the_weight_and_margin_are_checked() -> None:
    for name in ("follow_up_weight", "follow_up_below", "follow_up_margin"):
        with pytest.raises(ValueError, match=name):
            RankingConfig(**{name: 1.5})  # type: ignore[arg-type]


@pytest.mark.model
def test_follow_ups_with_the_model(tmp_path: Path) -> None:
    """With MiniLM and its defaults: the follow-up finds the previous step's capability, which
    the request alone does not."""
    engine = _engine(tmp_path / "read", "minilm", weight=default_ranking("minilm").follow_up_weight)
    try:
        follow_up = "what about 50 GBP?"
        alone = engine.suggest(T, _ask(follow_up))
        assert _tools(engine, alone)[:1] != [("convert_currency",)]
        got = engine.suggest(T, _ask(follow_up, previous_tools=("convert_currency",)))
        assert _tools(engine, got)[:1] == [("convert_currency",)]
        whole = engine.suggest(T, _ask("book a hotel room in Madrid", session_id="s0"))
        assert _tools(engine, whole)[:1] == [("book_hotel",)]
    finally:
        engine.close()


# a memory that holds a workflow whole (search, then book) and its steps alone
WORKFLOWS = (
    ("find flights from Paris to Rome and book the cheapest", ["search_flights", "book_flight"]),
    ("search flights from Paris to Rome on Friday", ["search_flights"]),
    ("search flights to Berlin next week", ["search_flights"]),
    ("book flight AF123 for Anna", ["book_flight"]),
    ("book a seat on flight LH400", ["book_flight"]),
    ("convert 100 USD to EUR", ["convert_currency"]),
    ("convert 20 euros into yen", ["convert_currency"]),
    ("convert 100 USD to EUR and email the result", ["convert_currency", "send_email"]),
    ("send an email to Bob about the meeting", ["send_email"]),
    ("book a hotel room in Rome", ["book_hotel"]),
)


def _workflows_engine(where: Path, embedder: str = "hashing") -> Engine:
    ranking = replace(default_ranking(embedder), follow_up_weight=1.0)
    engine = open_engine(where, embedder=embedder, ranking=ranking)
    for n, (intent, tools) in enumerate(WORKFLOWS):
        engine.record(T, make_record(f"w{n}", intent, tools))
    return engine


@pytest.mark.parametrize("embedder", ["hashing", pytest.param("minilm", marks=pytest.mark.model)])
def test_a_follow_up_that_moves_to_the_next_step_is_read_with_what_follows(
    tmp_path: Path, embedder: str
) -> None:
    """A request such as "now book it" after a flight search asks for the step that usually
    follows it, not the search again: the request is read with the profile it is nearer, the
    previous step's or that of the steps that follow it; a follow-up that names other
    arguments still repeats the step, though workflows show it followed by another."""
    engine = _workflows_engine(tmp_path / "read", embedder)
    try:
        got = engine.suggest(T, _ask("now book it", previous_tools=("search_flights",)))
        assert _tools(engine, got)[:1] == [("book_flight",)]
        assert got.read_as_follow_up
        # (hashed words: a follow-up sharing a word with what follows, "about" with the email's
        # request, would lean there; the model reads what the words mean)
        again = engine.suggest(T, _ask("and for 50 GBP?", previous_tools=("convert_currency",)))
        first = _tools(engine, again)[0]
        # the step again: alone (the model), or the workflow it opens (hashed words)
        assert first == ("convert_currency",) or (
            embedder == "hashing" and first == ("convert_currency", "send_email")
        )
        assert again.read_as_follow_up
    finally:
        engine.close()


def test_a_follow_up_reads_the_previous_step_once(tmp_path: Path) -> None:
    """However many rankings a Suggest with a context makes (the request alone, its plans'
    basis, its reading as a follow-up, the step again or what follows it), the previous step
    and what followed it are read from the store once."""
    engine = _workflows_engine(tmp_path / "read")
    try:
        sessions = engine._state.repo.sessions
        for context in (
            {"previous_tools": ("search_flights",)},
            {"previous_patterns": (f"patterns/{_stored_workflow(engine, 1)}",)},
        ):
            transitions = count_calls(sessions, "transitions_from")
            got = engine.suggest(T, _ask("now book it", **context))
            assert got.read_as_follow_up
            # one read per capability standing for the step: here, one
            assert transitions.count == 1, context
            del sessions.transitions_from  # the instance's counter: the class's method again
        engine.record(T, replace(make_record("s", *WORKFLOWS[1]), session_id="trip"))
        steps = count_calls(sessions, "session_step")
        transitions = count_calls(sessions, "transitions_from")
        engine.suggest(T, _ask("now book it and tell me the price", session_id="trip"))
        assert (steps.count, transitions.count) == (1, 1)
    finally:
        engine.close()


def _stored_workflow(engine: Engine, n: int) -> str:
    """The pattern of WORKFLOWS[n] (recording it again only counts a use)."""
    intent, tools = WORKFLOWS[n]
    return engine.record(T, make_record(f"again{n}", intent, tools)).pattern_id
