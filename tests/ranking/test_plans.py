"""Plans (docs/ranking.md, Plans): the request's parts, the bounded composition search, the
links between parts."""

from __future__ import annotations

import gc
import itertools
import json
import tracemalloc
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.domain.limits import LIMITS
from pml_server.domain.lru import Lru
from pml_server.domain.model import IntentView, ParamView, PatternView, ScoreParts, Suggestion
from pml_server.ranking import plans
from pml_server.ranking.plans import (
    DETAIL_WEIGHT,
    INTRO_WEIGHT,
    MAX_PLAN_PARTS,
    MAX_REQUEST_PARTS,
    PartHit,
    _flow,
    _parts,
    _steps,
    compose,
    data_flow_order,
    link_parts,
    name_words,
    pooled_part_vectors,
    search_bound,
    split_request,
    split_request_spans,
    split_request_weighted,
    step_match,
    text_words,
    tool_words,
)
from tests.support import pattern


def _score(match: float, reliability: float = 1.0) -> ScoreParts:
    return ScoreParts(match, match, 0.0, 1.0, 1.0, 1.0, 1.0, match, reliability)


def _suggestion(cap: str, tools: tuple[str, ...], params: tuple[ParamView, ...] = ()) -> Suggestion:
    view = replace(pattern(cap, capability_id=cap, tools=tools), params=params)
    return Suggestion(cap, view, _score(0.8))


def _hit(cap: str, tools: tuple[str, ...], match: float) -> PartHit:
    return PartHit(_suggestion(cap, tools), match)


REQUEST = (
    "find the movie Mulholland Drive",
    "get the credits of that movie",
    "send an email with the list",
)


def test_split_request_cuts_sentences_and_connectives() -> None:
    parts = split_request(
        "Find the movie Mulholland Drive. Then get its credits, and finally send an email to Ann."
    )
    assert parts == ("Find the movie Mulholland Drive", "get its credits", "send an email to Ann")


def test_split_request_cuts_one_clause_at_and() -> None:
    parts = split_request("find the director of Mulholland Drive and list every film they made")
    assert parts == ("find the director of Mulholland Drive", "list every film they made")


def test_short_request_is_one_part() -> None:
    assert split_request("read a json file") == ("read a json file",)


def test_split_request_is_bounded() -> None:
    text = ". ".join(f"open folder{n} then read file{n}" for n in range(50))
    assert len(split_request(text)) == MAX_REQUEST_PARTS
    # sentences that only repeat the one before join it (`_restates`): fewer parts still
    repeated = ". ".join(f"do step number {n} now" for n in range(50))
    assert 1 <= len(split_request(repeated)) <= MAX_REQUEST_PARTS


@pytest.mark.parametrize(
    "sentence", ["read files. ", "search movie. send mail. ", "Please provide the data. "]
)
def test_a_request_of_many_short_sentences_reads_each_word_once(
    monkeypatch: pytest.MonkeyPatch, sentence: str
) -> None:
    """The longest intent (4,096 characters) of some 340 short sentences: each piece's words
    are read once, not again at every piece joining a growing part (that cost 0.4 s a split,
    quadratic in the request; no timing assert: the characters read are counted)."""
    from pml_server.ranking.plans import _parts

    read = [0]

    def counting(real: Callable[[str], object]) -> Callable[[str], object]:
        def wrapper(text: str) -> object:
            read[0] += len(text)
            return real(text)

        return wrapper

    monkeypatch.setattr(_parts, "_words", counting(_parts._words))
    monkeypatch.setattr(_parts, "content_words", counting(_parts.content_words))
    text = (sentence * 400)[: LIMITS.intent.bound]
    parts, _, spans = _parts.split_request_spans(text)
    assert 1 <= len(parts) <= MAX_REQUEST_PARTS
    assert spans[0][0] == 0
    assert spans[-1][1] >= len(text) - 2
    assert read[0] <= 4 * len(text)


@pytest.mark.timeout(120)
def test_a_long_whitespace_run_is_read_once() -> None:
    """A run of spaces is matched from its start only: trying every position inside it read
    the run again each time (a 4,096-character intent of spaces took 3 s to split, 100,000
    spaces hours; no timing assert beyond the generous timeout)."""
    run = " " * 100_000
    assert split_request(f"a{run}b") == (f"a{run}b",)
    parts = split_request(f"find the movie Alien by its title{run}and send its cast list to Ann")
    assert parts == ("find the movie Alien by its title", "send its cast list to Ann")
    parts = split_request(f"Find the movie Alien.{run}Then send the cast to Ann.")
    assert parts == ("Find the movie Alien", "send the cast to Ann")


def test_an_opening_statement_counts_less_in_coverage() -> None:
    parts, weights = split_request_weighted(
        "I am working on a film project for school. Please find the movie Alien. "
        "Then send an email to Ann with its cast."
    )
    assert parts == (
        "I am working on a film project for school",
        "Please find the movie Alien",
        "send an email to Ann with its cast",
    )
    assert weights == (INTRO_WEIGHT, 1.0, 1.0)
    assert INTRO_WEIGHT < 1.0


def test_a_detail_sentence_counts_less_and_a_continuation_joins() -> None:
    parts, weights = split_request_weighted(
        "Find the movie Alien by its title. Quality matters a lot for our archive team. "
        "Then send an email to Ann. The message should list its whole cast."
    )
    assert parts == (
        "Find the movie Alien by its title",
        "Quality matters a lot for our archive team",
        "send an email to Ann The message should list its whole cast",
    )
    assert weights == (1.0, DETAIL_WEIGHT, 1.0)


def test_a_word_names_the_tool_word_it_begins_with() -> None:
    words = text_words("estimate the speedup of parallel computing")
    assert step_match("estimate_parallel_speed", words) == 1.0
    assert step_match("get_data", words) == 0.0


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("get_weather_forecast", ["get", "weather", "forecast"]),
        ("getWeatherForecast", ["get", "weather", "forecast"]),
        ("GetWeatherForecast", ["get", "weather", "forecast"]),
        ("get-weather-forecast", ["get", "weather", "forecast"]),
        ("weather.get_forecast", ["weather", "get", "forecast"]),
        ("weather/forecast:get", ["weather", "forecast", "get"]),
        ("HTTPRequest", ["http", "request"]),
        ("GET_USER_PROFILE", ["get", "user", "profile"]),
        ("estimate_vo2_max", ["estimate", "vo2", "max"]),
        ("ai2sql", ["ai2sql"]),
        ("mp3Convert", ["mp3", "convert"]),
        ("startEngine", ["start", "engine"]),
        ("météo_prévision", ["météo", "prévision"]),
        ("__", []),
    ],
)
def test_tool_names_of_every_convention_split_into_words(name: str, words: list[str]) -> None:
    assert name_words(name) == words


def test_a_camel_case_tool_is_named_like_its_snake_case_twin() -> None:
    """Tool names come in every convention: a request names the words of `startEngine` as it
    names those of `start_engine` (before, the camelCase name was one word, `starte`, that no
    request named)."""
    words = text_words("please start the engine")
    assert step_match("startEngine", words) == step_match("start_engine", words) == 1.0
    assert tool_words("displayCarStatus") == tool_words("display_car_status")
    assert tool_words("lock-doors") == tool_words("lock_doors")


def test_a_tool_the_pattern_repeats_runs_once() -> None:
    hits = [
        [_hit("film", ("get_film_info", "analyze_media", "get_film_info"), 0.8)],
        [_hit("mail", ("send_email",), 0.8)],
    ]
    composed = compose(("get the film info for Alien", "send an email to Ann"), hits, 3)
    assert composed.plans
    assert composed.plans[0].tools == ("get_film_info", "send_email")


def test_composes_parts_in_request_order_with_their_named_steps() -> None:
    hits = [
        [_hit("movie", ("search_movie",), 0.7)],
        [_hit("credit", ("search_movie", "get_movie_credit"), 0.6)],
        [_hit("mail", ("send_email",), 0.8)],
    ]
    composed = compose(REQUEST, hits, 3)
    top = composed.plans[0]
    assert [p.suggestion.capability_id for p in top.parts] == ["movie", "credit", "mail"]
    # the second part names only its credit step: search_movie is the first part's
    assert top.tools == ("search_movie", "get_movie_credit", "send_email")
    assert [p.covers for p in top.parts] == [(0,), (1,), (2,)]
    assert top.score.coverage == 1.0
    assert top.score.total > top.score.best_single
    assert top.score.extra_part_cost > 0


def test_a_one_step_pattern_whose_tool_the_part_does_not_name_weighs_as_any_step() -> None:
    # docs/ranking.md, Plans, "Which capability covers which part": a one-step pattern's match
    # on a part is weighed by how well the part names its tool, like a longer pattern's (no
    # floor): a stronger match of an unnamed tool loses to the tool the part names
    unnamed = text_words("send an email with the list")
    assert _steps._steps_factor(("post_message",), unnamed) == pytest.approx(1 - plans.STEP_WEIGHT)
    assert _steps._steps_factor(("send_email",), unnamed) == pytest.approx(1.0)
    request = (REQUEST[0], REQUEST[2])
    hits = [
        [_hit("movie", ("search_movie",), 0.9)],
        [_hit("notify", ("post_message",), 0.95), _hit("mail", ("send_email",), 0.8)],
    ]
    top = compose(request, hits, 3).plans[0]
    assert top.tools == ("search_movie", "send_email")


def test_covered_request_gets_no_plan() -> None:
    whole = _hit("whole", ("search_movie", "get_movie_credit", "send_email"), 0.7)
    hits = [
        [whole, _hit("movie", ("search_movie",), 0.9)],
        [whole, _hit("credit", ("get_movie_credit",), 0.9)],
        [whole, _hit("mail", ("send_email",), 0.9)],
    ]
    composed = compose(REQUEST, hits, 3)
    assert composed.covered_by_one
    assert composed.plans == ()


def test_a_whole_request_suggestion_on_every_part_covers_it() -> None:
    hits = [
        [_hit("movie", ("search_movie",), 0.9)],
        [_hit("credit", ("get_movie_credit",), 0.9)],
        [_hit("mail", ("send_email",), 0.9)],
    ]
    assert compose(REQUEST, hits, 3).plans
    # the whole request's top suggestion reaches WHOLE_COVER on every part: it covers it
    whole = [[_hit("all", ("search_movie", "send_email"), plans.WHOLE_COVER)]] * 3
    composed = compose(REQUEST, hits, 3, whole=whole)
    assert composed.covered_by_one
    assert composed.plans == ()
    # below it on one part: the plan stays
    short = [*whole[:2], [_hit("all", ("search_movie", "send_email"), 0.1)]]
    assert compose(REQUEST, hits, 3, whole=short).plans


def test_plan_size_zero_and_one_part_give_no_plan() -> None:
    hits = [[_hit("movie", ("search_movie",), 0.7)], [_hit("mail", ("send_email",), 0.8)]]
    assert compose(REQUEST[:2], hits, 0).plans == ()
    assert compose(REQUEST[:1], hits[:1], 3).plans == ()


def test_weak_matches_cover_nothing() -> None:
    hits = [
        [_hit("movie", ("search_movie",), 0.1)],
        [_hit("credit", ("get_movie_credit",), 0.1)],
        [_hit("mail", ("send_email",), 0.1)],
    ]
    assert compose(REQUEST, hits, 3).plans == ()


def _param(name: str, kind: str) -> ParamView:
    return ParamView(name=f"${name.upper()}", json_type=kind, secret=False)


def _with_params(view: PatternView, *params: ParamView) -> PatternView:
    schema = {"type": "object", "properties": {p.name: {"type": p.json_type} for p in params}}
    return replace(view, params=params, parameter_schema_json=json.dumps(schema))


def test_link_joins_an_identifier_output_to_the_input_it_fits() -> None:
    people = pattern("people", tools=("search_people",))
    credits = _with_params(
        pattern("credits", tools=("get_person_movie_credit",)),
        _param("person_id", "integer"),
        _param("language", "string"),
    )
    links, unlinked = link_parts([people, credits])
    assert [(k.from_part, k.output, k.to_part, k.input) for k in links] == [
        (0, "person_id", 1, "person_id")
    ]
    assert unlinked == 0


def test_no_link_to_a_non_scalar_input_or_an_unrelated_name() -> None:
    people = pattern("people", tools=("search_people",))
    other = _with_params(
        pattern("other", tools=("get_weather",)),
        _param("person_ids", "array"),
        _param("city_id", "string"),
    )
    links, unlinked = link_parts([people, other])
    assert links == ()
    assert unlinked == 2


WORDS = st.sampled_from(["person", "movie", "city", "order", "user", "file", "crop", "ticket"])
VERBS = st.sampled_from(["search", "get", "find", "list", "create"])
KINDS = st.sampled_from(["string", "integer", "number", "array", "object", "boolean", ""])


@st.composite
def part_patterns(draw: st.DrawFn) -> list[PatternView]:
    out = []
    for n in range(draw(st.integers(1, 4))):
        tools = tuple(f"{draw(VERBS)}_{draw(WORDS)}" for _ in range(draw(st.integers(1, 3))))
        params = tuple(
            _param(f"{draw(WORDS)}_{draw(st.sampled_from(['id', 'key', 'name']))}", draw(KINDS))
            for _ in range(draw(st.integers(0, 3)))
        )
        out.append(_with_params(pattern(f"p{n}", tools=tools), *params))
    return out


@given(part_patterns())
@settings(max_examples=200, deadline=None)
def test_links_only_join_compatible_outputs_and_inputs(patterns: list[PatternView]) -> None:
    links, _ = link_parts(patterns)
    for link in links:
        assert link.from_part < link.to_part
        stem, kind = plans.identifier_inputs(patterns[link.to_part])[link.input]
        produced = plans.outputs(patterns[link.from_part])
        assert link.output in produced
        assert plans.compatible(produced[link.output], stem, kind)
        assert kind in {"string", "integer", "number", ""}


# ---- adversarial stores: the search's bound and its invariants ----

CAPS = st.sampled_from([f"cap{n}" for n in range(12)])
TOOLS = st.sampled_from(["search_movie", "get_movie_credit", "send_email", "read_file", "x"])


@st.composite
def adversarial(draw: st.DrawFn) -> tuple[list[str], list[list[PartHit]]]:
    parts = draw(st.integers(1, 9))
    request = [
        " ".join(draw(st.lists(st.sampled_from(["movie", "credit", "email", "file", "search",
                                                "send", "read"]), min_size=1, max_size=6)))
        for _ in range(parts)
    ]  # fmt: skip
    hits = [
        [
            _hit(draw(CAPS), tuple(draw(st.lists(TOOLS, min_size=1, max_size=4))),
                 draw(st.floats(0.0, 1.0)))
            for _ in range(draw(st.integers(0, 10)))
        ]
        for _ in range(parts)
    ]  # fmt: skip
    return request, hits


@given(
    adversarial(),
    st.integers(0, 10),
    st.lists(st.floats(0.01, 1.0), min_size=9, max_size=9),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_search_stays_within_its_bound_and_never_repeats_a_part(
    case: tuple[list[str], list[list[PartHit]]], size: int, weights: list[float], pooled: bool
) -> None:
    request, hits = case
    composed = compose(request, hits, size, weights=weights, pooled=pooled)
    assert composed.evaluated <= search_bound(len(request))
    assert len(composed.plans) <= size
    for plan in composed.plans:
        caps = [p.suggestion.capability_id for p in plan.parts]
        assert len(caps) == len(set(caps))  # never the same capability twice
        assert 2 <= len(plan.parts) <= MAX_PLAN_PARTS
        covered = [n for p in plan.parts for n in p.covers]
        assert len(covered) == len(set(covered))  # no request part covered twice
        assert all(list(p.covers) == sorted(p.covers) for p in plan.parts)
        patterns = [p.suggestion.pattern for p in plan.parts]
        assert data_flow_order(patterns, [p.steps for p in plan.parts]) == tuple(
            range(len(plan.parts))
        )  # the parts run in their data-flow order (request order without data flow)
        assert all(p.steps for p in plan.parts)
        assert plan.score.total > plan.score.best_single
        assert not pooled or plan.score.total > plans.MIN_PLAN_TOTAL_POOLED
        owners = [set(p.tools) for p in plan.parts]
        assert sum(len(o) for o in owners) == len(set().union(*owners))  # no tool in two parts
    if composed.covered_by_one:
        assert composed.plans == ()
    # one capability among every part's hits with a match that covers it: never a plan
    whole = _hit("whole", ("search_movie", "send_email"), 0.9)
    dominated = compose(request, [[whole, *h] for h in hits], size, weights=weights, pooled=pooled)
    assert dominated.plans == ()


def _normalized(pattern_id: str, code: str) -> PatternView:
    """A pattern view as the service builds it: parameters, schema and steps from the core."""
    from pml_server import _core
    from pml_server.capture.steps import step_views

    n = _core.normalize(code, "javascript")
    params = tuple(ParamView(p.name, p.json_type, p.secret) for p in n.params)
    return replace(
        pattern(pattern_id, tools=tuple(s.tool for s in n.steps)),
        params=params,
        parameter_schema_json=n.schema_json,
        steps=step_views(n.steps),
    )


def test_links_use_the_data_flow_the_steps_learned() -> None:
    # the first part's own code shows search_lead's output feeding a `crm_contact_id`
    first = _normalized(
        "a",
        'const r1 = await mcp.search_lead({query: "Ann"});\n'
        "const r2 = await mcp.open_ticket({crm_contact_id: r1.hits[0].key});",
    )
    second = _normalized("b", "const r1 = await mcp.send_invoice({crm_contact_id: 42});")
    links, unlinked = link_parts([first, second], [(0,), (0,)])
    assert [(k.from_part, k.output, k.to_part, k.input) for k in links] == [
        (0, "crm_contact_id", 1, "crm_contact_id")
    ]
    assert unlinked == 0
    # without the step that reads it, the name alone (search_lead -> lead_id) does not fit
    lone = _normalized("c", 'const r1 = await mcp.search_lead({query: "Ann"});')
    links, unlinked = link_parts([lone, second], [(0,), (0,)])
    assert links == ()
    assert unlinked == 1


def test_step_links_never_join_a_non_scalar_input() -> None:
    first = _normalized(
        "a",
        'const r1 = await mcp.search_lead({query: "Ann"});\n'
        "const r2 = await mcp.open_ticket({crm_contact_id: r1.hits[0].key});",
    )
    second = _normalized("b", "const r1 = await mcp.send_invoice({crm_contact_id: [1, 2]});")
    links, _ = link_parts([first, second], [(0,), (0,)])
    assert links == ()


def test_spans_locate_each_part_in_the_request() -> None:
    text = (
        "I am working on a film project for school.  Please find the movie Alien, "
        "and then send an email to Ann with its cast. Thanks!"
    )
    parts, _, spans = split_request_spans(text)
    assert len(parts) == len(spans) >= 2
    for part, (start, end) in zip(parts, spans, strict=True):
        assert text[start:end].startswith(part.split()[0])
        assert text[start:end].endswith(part.split()[-1])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # in order


@given(
    st.lists(
        st.sampled_from(
            [
                "Find a movie.",
                "then",
                "and",
                "send mail",
                "Ok.",
                "  ",
                "The file is big.",
                "read it",
                ",",
                "finally",
            ]
        ),
        max_size=30,
    )
)
@settings(max_examples=200, deadline=None)
def test_spans_always_lie_in_order_inside_the_request(words: list[str]) -> None:
    text = " ".join(words)
    parts, weights, spans = split_request_spans(text)
    assert len(parts) == len(weights) == len(spans) <= MAX_REQUEST_PARTS
    assert all(0 <= a <= b <= len(text) for a, b in spans)
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(spans))


def test_pooled_part_vectors_take_the_shared_context_off() -> None:
    rng = np.random.default_rng(3)
    mean = rng.normal(size=8).astype(np.float32)
    spans = rng.normal(size=(3, 8)).astype(np.float32)
    out = pooled_part_vectors(mean, spans)
    expected = spans - plans.PART_CONTEXT * mean
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    assert out.dtype == np.float32
    # a part that is the context itself has no direction left: a zero row, never NaN
    flat = pooled_part_vectors(mean, (plans.PART_CONTEXT * mean)[None, :])
    assert not flat.any()


def test_no_plan_whose_tools_one_whole_request_suggestion_runs() -> None:
    hits = [[_hit("movie", ("search_movie",), 0.9)], [_hit("mail", ("send_email",), 0.9)]]
    request = REQUEST[::2]
    assert compose(request, hits, 3).plans
    # the whole request's suggestion runs both tools, below the cover test on one part
    both = _hit("both", ("send_email", "search_movie", "read_file"), 0.1)
    composed = compose(request, hits, 3, whole=[[both], [both]])
    assert not composed.covered_by_one
    assert composed.plans == ()
    # one running only one of them leaves the plan
    one = _hit("one", ("search_movie", "read_file"), 0.1)
    assert compose(request, hits, 3, whole=[[one], [one]]).plans


def test_pooled_part_vectors_need_the_least_plan_total() -> None:
    hits = [[_hit("movie", ("search_movie",), 0.55)], [_hit("mail", ("send_email",), 0.55)]]
    request = REQUEST[::2]
    alone = compose(request, hits, 3)
    assert alone.plans
    assert alone.plans[0].score.total <= plans.MIN_PLAN_TOTAL_POOLED
    assert compose(request, hits, 3, pooled=True).plans == ()
    strong = [[_hit("movie", ("search_movie",), 0.95)], [_hit("mail", ("send_email",), 0.95)]]
    assert compose(request, strong, 3, pooled=True).plans


def test_a_part_runs_after_the_later_mentioned_part_that_feeds_it() -> None:
    credits = _with_params(
        pattern("credits", tools=("get_person_movie_credit",)), _param("person_id", "integer")
    )
    people = pattern("people", tools=("search_people",))
    mail = pattern("mail", tools=("send_email",))
    # mentioned: credits, mail, people; people feeds credits' person_id
    assert data_flow_order([credits, mail, people], [(0,), (0,), (0,)]) == (1, 2, 0)
    # fed by an earlier-mentioned part already: the order of mention
    assert data_flow_order([people, credits, people], [(0,), (0,), (0,)]) == (0, 1, 2)
    # a noun that merely includes the stem feeds nothing (get_person_movie_credit, person_id)
    other = _with_params(pattern("o", tools=("get_person_info",)), _param("person_id", "string"))
    assert data_flow_order([other, credits], [(0,), (0,)]) == (0, 1)
    # a non-scalar input is never fed
    listed = _with_params(pattern("l", tools=("rank_people",)), _param("person_id", "array"))
    assert data_flow_order([listed, people], [(0,), (0,)]) == (0, 1)


def _must_follow(patterns: list[PatternView], steps: list[tuple[int, ...]]) -> set[tuple[int, int]]:
    """(i, j): part j takes an identifier input only part i, mentioned after it, produces
    (exact noun), and j feeds nothing of i's."""
    produced = [plans.outputs(p, steps[n]) for n, p in enumerate(patterns)]
    taken = [plans.identifier_inputs(p, steps[n]) for n, p in enumerate(patterns)]
    edges = set()
    for j in range(len(patterns)):
        before = set().union(*(_flow._feeds(produced[i], taken[j]) for i in range(j)))
        for i in range(j + 1, len(patterns)):
            if _flow._feeds(produced[i], taken[j]) - before and not _flow._feeds(
                produced[j], taken[i]
            ):
                edges.add((i, j))
    return edges


@given(part_patterns())
@settings(max_examples=300, deadline=None)
def test_data_flow_order_is_a_permutation_that_follows_the_data(
    patterns: list[PatternView],
) -> None:
    steps = [tuple(range(len(p.tools_used))) for p in patterns]
    order = data_flow_order(patterns, steps)
    assert sorted(order) == list(range(len(patterns)))
    edges = _must_follow(patterns, steps)
    if not edges:
        assert order == tuple(range(len(patterns)))  # the order of mention
    nodes = set(range(len(patterns)))
    while any(all((i, j) not in edges or i not in nodes for i in nodes) for j in nodes):
        nodes -= {j for j in nodes if all((i, j) not in edges or i not in nodes for i in nodes)}
    if not nodes:  # no cycle: every producer runs before the part it feeds
        position = {part: n for n, part in enumerate(order)}
        assert all(position[i] < position[j] for i, j in edges)


def test_no_plan_whose_tools_any_of_the_whole_requests_suggestions_runs() -> None:
    """The subset test reads the whole request's first `WHOLE_HITS` suggestions (a suggestion
    ranked below the cover test's `COVER_HITS` still makes a plan of its tools redundant)."""
    hits = [[_hit("movie", ("search_movie",), 0.9)], [_hit("mail", ("send_email",), 0.9)]]
    request = REQUEST[::2]
    others = [_hit(f"other{n}", (f"tool_{n}",), 0.1) for n in range(plans.WHOLE_HITS - 1)]
    both = _hit("both", ("send_email", "search_movie"), 0.1)
    assert plans.COVER_HITS < plans.WHOLE_HITS
    # ranked last of the first WHOLE_HITS: no plan
    last = [*others, both]
    composed = compose(request, hits, 3, whole=[last, last])
    assert not composed.covered_by_one
    assert composed.plans == ()
    # ranked past them: the plan stays
    past = [*others, _hit("filler", ("tool_x",), 0.1), both]
    assert compose(request, hits, 3, whole=[past, past]).plans
    # the cover test reads only the first COVER_HITS: a covering suggestion past them covers
    # nothing, and its tools do not make the plan redundant
    cover = _hit("cover", ("read_file",), 0.95)
    late = [*others, cover]
    composed = compose(request, hits, 3, whole=[late, late])
    assert not composed.covered_by_one
    assert composed.plans


def _described(cap: str, tools: tuple[str, ...], code: str, *intents: str) -> Suggestion:
    view = replace(
        pattern(cap, capability_id=cap, tools=tools),
        original_code=code,
        intents=tuple(IntentView(f"i{n}", text, 1, 0) for n, text in enumerate(intents)),
    )
    return Suggestion(cap, view, _score(0.8))


def test_step_descriptions_come_from_the_intent_parts_holding_each_steps_values() -> None:
    suggestion = _described(
        "trip",
        ("find_hotel", "get_forecast"),
        'const r1 = await mcp.find_hotel({city: "Paris", stars: 4});\n'
        'const r2 = await mcp.get_forecast({city: "Oslo"});',
        "Book me something to sleep in Paris near the river. Then how cold will Oslo be?",
    )
    hotel, forecast = plans.step_descriptions(suggestion.pattern)
    words = plans.content_words
    assert words("Paris river sleep") <= hotel
    assert not words("Oslo") & hotel
    assert words("Oslo cold") <= forecast
    assert not words("Paris") & forecast
    # a part holding no value describes the step whose tool it names, and only that one
    named = _described(
        "named", ("find_hotel", "get_forecast"), "// no call", "Find a hotel downtown please."
    )
    hotel, forecast = plans.step_descriptions(named.pattern)
    words = plans.content_words
    assert words("downtown") <= hotel
    assert forecast == frozenset()


def test_step_descriptions_kept_between_requests_stay_within_their_bytes() -> None:
    """A pattern's code (up to 256 KiB) is the client's: the descriptions kept between requests
    are bounded by the bytes of what they are read from, not by a count of patterns (4,096 of
    them could keep a gigabyte of code alive). 400 patterns of 200 KiB of code each, read as
    if from the store (the views dropped after each request), keep at most the bound."""
    bound = 32 * 1024 * 1024
    call = 'const r1 = await mcp.find_hotel({city: "Paris"});\n'
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(400):
            code = call + f"// {n} " + "x" * (200 * 1024)
            hotel = _described("big", ("find_hotel",), code, "a hotel in Paris please")
            (words,) = plans.step_descriptions(hotel.pattern)
            assert plans.content_words("Paris hotel") <= words
        del code, hotel
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= bound, f"{held} bytes held after 400 patterns of 200 KiB; the bound is {bound}"


def test_step_descriptions_of_many_steps_stay_within_their_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Patterns of many short steps: what an entry holds besides its texts (a set per step, the
    key's tuples, its place in the LRU) is counted too, so the descriptions kept stay within
    their bound (a smaller one here, the same accounting). Counting the texts and words only,
    64-step patterns held 2.8 times the bound."""
    bound = 1024 * 1024
    monkeypatch.setattr(_steps, "_descriptions", Lru(bound, weigh=_steps._description_bytes))
    tools = tuple(f"step_{i}" for i in range(64))

    def described(n: int) -> Suggestion:
        code = "\n".join(f'await mcp.{t}({{city: "Paris{n}"}});' for t in tools)
        return _described("many", tools, code, f"a hotel in Paris{n} please")

    plans.step_descriptions(described(0).pattern)  # the regular expressions' own cache
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, 300):  # past the bound twice over even counted the old way
            assert len(plans.step_descriptions(described(n).pattern)) == len(tools)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= bound, f"{held} bytes held; the bound is {bound}"


def test_a_part_prefers_the_step_its_stored_intents_describe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two patterns name the part's tool equally well; the one whose stored intents describe
    that step in the part's words takes the part though its match is a little lower
    (docs/ranking.md, Plans, "Step descriptions")."""
    request = ("book a room by the Seine in Paris", "send an email with the list")
    seine = _described(
        "seine",
        ("book_room",),
        'mcp.book_room({city: "Paris"})',
        "Book a room near the Seine in Paris",
    )
    office = _described(
        "office",
        ("room_book",),
        'mcp.room_book({floor: "third"})',
        "Room booking on the third floor for the office meeting tomorrow",
    )
    mail = _suggestion("mail", ("send_email",))
    hits = [[PartHit(office, 0.82), PartHit(seine, 0.8)], [PartHit(mail, 0.9)]]
    top = compose(request, hits, 3).plans[0]
    assert top.parts[0].suggestion.capability_id == "seine"
    # without the descriptions the higher match wins
    monkeypatch.setattr(_steps, "DESCRIBED_WEIGHT", 0.0)
    top = compose(request, hits, 3).plans[0]
    assert top.parts[0].suggestion.capability_id == "office"


def test_a_step_no_tool_name_names_runs_when_its_description_fits() -> None:
    """A part naming no step of a multi-step pattern runs the step whose stored description
    fits its words (`DESCRIBED_NAMES`), and no step when none fits enough."""
    desk = _described(
        "desk",
        ("check_login", "send_report"),
        'const r1 = await mcp.check_login({user: "mike"});\n'
        'const r2 = await mcp.send_report({to: "ops@example.com"});',
        "Verify the credentials of user mike are valid. Then mail the summary to ops@example.com.",
    )
    words = text_words("verify the credentials of user anna are valid")
    content = plans.content_words("verify the credentials of user anna are valid")
    descriptions = plans.tool_descriptions([[PartHit(desk, 0.8)]])
    tools = desk.pattern.tools_used
    assert plans.named_steps(tools, words) == ()  # no tool name is named
    assert plans.named_steps(tools, words, content, descriptions) == (0,)
    unrelated = plans.content_words("bake a chocolate cake for the party")
    assert plans.named_steps(tools, words, unrelated, descriptions) == ()
    # in a plan: the part runs the described step
    request = ("verify the credentials of user anna are valid", "send an email with the list")
    hits = [[PartHit(desk, 0.95)], [_hit("mail", ("send_email",), 0.95)]]
    top = compose(request, hits, 3).plans[0]
    assert top.tools == ("check_login", "send_email")


def test_a_sentence_that_only_asks_again_joins_the_one_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ "Please provide the requested data" adds no task of its own: it joins the sentence
    before (docs/ranking.md, Plans, "Request parts"); a sentence with a new task does not."""
    text = (
        "I want the energy consumption data for an office in Berlin. "
        "Please provide the requested data. "
        "Please retrieve the maintenance history of the Main branch library."
    )
    parts = split_request(text)
    assert len(parts) == 2
    assert parts[0].endswith("Please provide the requested data")
    assert parts[1].startswith("Please retrieve the maintenance history")
    monkeypatch.setattr(_parts, "RESTATE_JOINS", False)
    assert len(split_request(text)) == 3


@given(
    st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "retrieve", "the"]), min_size=1)
)
def test_restating_never_adds_a_part(words: list[str]) -> None:
    """Joining restating sentences only ever removes parts, and every part still lies in the
    request in order."""
    text = ". ".join(" ".join(words[: n + 1]) for n in range(len(words))) + "."
    parts, _, spans = split_request_spans(text)
    with_off = _parts.RESTATE_JOINS
    try:
        _parts.RESTATE_JOINS = False
        assert len(split_request(text)) >= len(parts)
    finally:
        _parts.RESTATE_JOINS = with_off
    at = 0
    for start, end in spans:
        assert at <= start <= end <= len(text)
        at = end
