"""Context filters are part of retrieval (docs/ranking.md, Context filters): with
`available_tools`, `tags` or the request's own `min_success`, Suggest answers the best-ranked
permitted capabilities of the whole memory. The property: on a real engine, the answer (ranked
in the core with and without `explain`, and by the oracle's Python path) equals the full
ranking of every stored pattern,
filtered, however far the permitted patterns lie from the unrestricted shortlist (the fetch
limit is made tiny here so that shortlist holds few of them)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pml_server.capture.rules import same_tool
from pml_server.domain.model import PageRequest, SuggestContext, SuggestQuery, SuggestResult
from pml_server.ranking import RankingConfig, resolve_settings
from pml_server.ranking.plans import split_request
from pml_server.ranking.table import STEP_NEIGHBOURS
from pml_server.ranking.transitions import transition_factors
from pml_server.service import Engine, _sessions
from testing.ranking_oracle import Retrieval, pattern_semantic, rank_lazily, rank_next
from testing.ranking_oracle import path as oracle
from testing.ranking_oracle.path import Retrieved
from tests.support import Clock, make_record, open_engine

WORDS = ["read", "parse", "csv", "json", "upload", "send", "email", "report", "image", "zip"]
# namespaced spellings of one tool too (`read_file`, `fs:read_file`, `mcp__fs__read_file`)
TOOLS = [
    "read_file",
    "parse_csv",
    "gmail_send",
    "s3_put",
    "resize",
    "fs:read_file",
    "mcp__fs__read_file",
    "search",
]
TAGS = ["prod", "beta"]
# One hit of each index per suggestion asked: the unrestricted shortlist is tiny.
# the follow-up reading is a second ranking above the one these references model
# (docs/ranking.md, Sessions, "Follow-up requests"; tests/service/test_follow_ups.py)
TINY_FETCH = RankingConfig(overfetch=1, follow_up_weight=0.0)


def _full_ranking(
    engine: Engine,
    tenant: str,
    query: SuggestQuery,
    transitions: Mapping[str, float] | None = None,
) -> SuggestResult:
    """The reference: every stored pattern scored (each intent's exact cosine, its document's
    BM25), then `rank` with the query's filters (rank_lazily with the ceiling of every factor
    is `rank`) and the session signal's `transitions` factors."""
    state = engine._state
    index = state.indexes.get(tenant)
    if index is None:  # nothing stored (a first record that failed is rejected)
        return SuggestResult(())
    vector = state.embed_one(query.intent)
    patterns = engine.list_patterns(tenant, PageRequest(page_size=1000)).items
    intents_of = {p.id: tuple(index.intents_of(p.id)) for p in patterns}
    cosine = index.exact_scores(vector, [i for ids in intents_of.values() for i in ids])
    bm25 = dict(index.lexical_hits(query.intent, 10_000))
    # the step evidence: the request's nearest intents in the whole memory (docs/ranking.md, Steps)
    neighbours = index.semantic(vector, STEP_NEIGHBOURS)
    steps = dict(
        zip(
            intents_of,
            index.ranks.step_factors(
                neighbours,
                list(intents_of),
                query.intent,
                state.ranking,
                index.ann,  # type: ignore[arg-type]  # the core index here
                vector,
            ),
            strict=True,
        )
    )
    retrievals = [
        Retrieval(p, pattern_semantic([cosine[i] for i in ids]), bm25.get(p, 0.0), steps[p])
        for p, ids in intents_of.items()
        if ids
    ]
    found = Retrieved(state.repo, tenant, retrievals, intents_of)
    ceiling = max([1.0, *(transitions or {}).values()])
    result = rank_lazily(
        query,
        found.retrievals,
        found.load,
        state.ranking,
        state.clock(),
        ceiling,
        transitions=transitions,
    )
    return found.complete(replace(result, filtered=()))


def _key(result: SuggestResult) -> list[tuple[str, str, float]]:
    return [(s.capability_id, s.pattern.id, s.score.total) for s in result.suggestions]


records = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
        st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3, unique=True),
        st.booleans(),  # failed
        st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
        st.integers(0, 30),  # path: repeats grow counters and intents
    ),
    min_size=1,
    max_size=40,
)
queries = st.lists(
    st.builds(
        SuggestQuery,
        intent=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        k=st.integers(1, 4),
        min_match=st.sampled_from([None, 0.0, 0.2]),
        min_success=st.sampled_from([None, 0.0, 0.6]),
        available_tools=st.one_of(
            st.none(), st.lists(st.sampled_from(TOOLS), max_size=4, unique=True).map(tuple)
        ),
        tags=st.lists(st.sampled_from([*TAGS, "never"]), max_size=1).map(tuple),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records, queries=queries)
def test_the_answer_is_the_full_ranking_filtered(
    records: list[tuple[list[str], list[str], bool, list[str], int]],
    queries: list[SuggestQuery],
) -> None:
    with tempfile.TemporaryDirectory() as where:
        engine = open_engine(Path(where), Clock(), ranking=TINY_FETCH)
        try:
            for n, (words, tools, failed, tags, path) in enumerate(records):
                record = make_record(
                    f"r{n}",
                    " ".join(words),
                    tools,
                    failed={tools[0]} if failed else None,
                    path=f"f{path}.json",
                    tags=tuple(tags),
                )
                engine.record("t", record)
            for query in queries:
                expected = _key(_full_ranking(engine, "t", query))
                # Filters that leave out no pattern retrieve as an unrestricted query does
                # (its shortlist: the tiny fetch limit here).
                index = engine._state.indexes.get("t")
                settings = resolve_settings(query, engine._state.ranking)
                restricted = index is None or index.permitted(settings, TINY_FETCH) is not None
                core = engine.suggest("t", query)
                explained = engine.suggest("t", replace(query, explain=True))
                assert _key(explained) == _key(core), query
                python = oracle.rank_suggestions(engine._state, "t", replace(query, explain=True))
                assert _key(python) == _key(core), query
                if restricted:
                    assert _key(core) == expected, query
        finally:
            engine.close()


def test_a_permitted_pattern_far_from_the_shortlist_is_found(tmp_path: Path) -> None:
    """The issue's example: offered tools whose only patterns are far from the query's
    unrestricted shortlist still answer, never empty while one passes min_match."""
    engine = open_engine(tmp_path, Clock(), ranking=TINY_FETCH)
    for n in range(30):
        engine.record("t", make_record(f"img{n}", f"generate image of kites {n}", ["gen_image"]))
    engine.record("t", make_record("s", "search the web for history", ["search_engine_query"]))
    query = SuggestQuery(
        "find information on the history of kites", k=1, min_match=0.0, min_success=0.0
    )
    unrestricted = engine.suggest("t", query)
    assert [s.pattern.tools_used for s in unrestricted.suggestions] == [("gen_image",)]
    offered = replace(query, available_tools=("search_engine_query", "generate_human_image"))
    for explain in (False, True):
        answer = engine.suggest("t", replace(offered, explain=explain))
        assert [s.pattern.tools_used for s in answer.suggestions] == [("search_engine_query",)]
    engine.close()


def test_an_offered_tool_is_the_stored_one_under_or_without_its_namespace(tmp_path: Path) -> None:
    """One memory, two clients naming tools differently (docs/ranking.md, Context filters):
    a pattern recorded with `github:create_issue` is runnable by an agent offered Claude Code's
    `mcp__github__create_issue` or the bare `create_issue`, not by one offered another
    server's tool of that name."""
    engine = open_engine(tmp_path, Clock())
    engine.record("t", make_record("i", "file a bug about the login page", ["github:create_issue"]))
    engine.record("t", make_record("r", "read the config file", ["mcp__fs__read_file"]))
    query = SuggestQuery("report a bug on login", min_match=0.0, min_success=0.0)
    for offered, tools in [
        (("mcp__github__create_issue",), [("github:create_issue",)]),
        (("create_issue", "read_file"), [("github:create_issue",), ("mcp__fs__read_file",)]),
        (("gitlab:create_issue", "create_issues", "fs:read"), []),
    ]:
        for explain in (False, True):
            answer = engine.suggest("t", replace(query, available_tools=offered, explain=explain))
            assert [s.pattern.tools_used for s in answer.suggestions] == tools, offered
    engine.close()


def _next_ranking(engine: Engine, tenant: str, query: SuggestQuery) -> SuggestResult:
    """The reference of "what usually comes next": every pattern of every capability that
    followed the step (no bound: these memories are small), ranked by the oracle's
    `rank_next` with the query's filters."""
    state = engine._state
    index = state.indexes.get(tenant)
    if index is None:
        return SuggestResult(())
    weights = _sessions.context_weights(state, tenant, query.context, state.clock())
    retrievals = []
    for capability_id in weights:
        capability = state.repo.capabilities.capability(tenant, capability_id)
        if capability is not None:
            retrievals += [Retrieval(p, 0.0, 0.0) for p in capability.pattern_ids]
    intents = {r.pattern_id: tuple(index.intents_of(r.pattern_id)) for r in retrievals}
    found = Retrieved(state.repo, tenant, retrievals, intents)
    result = rank_next(query, found.load(retrievals), weights, state.ranking, state.clock())
    return found.complete(replace(result, filtered=()))


SESSIONS = ["s1", "s2"]
session_records = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
        st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3, unique=True),
        st.booleans(),  # failed
        st.integers(0, 30),  # path
        st.sampled_from(["", *SESSIONS]),
    ),
    min_size=1,
    max_size=40,
)
contexts = st.one_of(
    st.builds(SuggestContext, session_id=st.sampled_from([*SESSIONS, "unknown"])),
    st.builds(
        SuggestContext,
        previous_tools=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=2).map(tuple),
    ),
)
# a request of two sentences asks for plans too (docs/ranking.md, Plans)
one_part = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
intents = st.one_of(
    st.just(""),
    one_part,
    one_part,
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=2, max_size=3),
        st.lists(st.sampled_from(WORDS), min_size=2, max_size=3),
    ).map(lambda pair: f"{' '.join(pair[0])} the file. Then {' '.join(pair[1])} the report."),
)
context_queries = st.lists(
    st.builds(
        SuggestQuery,
        intent=intents,
        k=st.integers(1, 4),
        min_match=st.just(0.0),
        min_success=st.sampled_from([None, 0.0, 0.6]),
        available_tools=st.one_of(
            st.none(), st.lists(st.sampled_from(TOOLS), max_size=4, unique=True).map(tuple)
        ),
        context=contexts,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=session_records, queries=context_queries)
def test_with_a_context_the_answer_is_the_full_ranking_filtered(
    records: list[tuple[list[str], list[str], bool, int, str]],
    queries: list[SuggestQuery],
) -> None:
    """The property above with sessions (docs/ranking.md, Sessions) and plans: a context's
    transitions lift the full ranking as they lift the answer; with an empty intent the
    answer is what usually comes next over every follower, filtered; every plan part runs
    offered tools only."""
    with tempfile.TemporaryDirectory() as where:
        engine = open_engine(Path(where), Clock(), ranking=TINY_FETCH)
        try:
            for n, (words, tools, failed, path, session) in enumerate(records):
                record = make_record(
                    f"r{n}",
                    " ".join(words),
                    tools,
                    failed={tools[0]} if failed else None,
                    path=f"f{path}.json",
                )
                engine.record("t", replace(record, session_id=session))
            state = engine._state
            for query in queries:
                index = state.indexes.get("t")
                settings = resolve_settings(query, state.ranking)
                restricted = index is None or index.permitted(settings, TINY_FETCH) is not None
                core = engine.suggest("t", query)
                explained = engine.suggest("t", replace(query, explain=True))
                assert _key(explained) == _key(core), query
                if len(split_request(query.intent)) > 1:
                    # its parts weigh in the step factor, which the references do not read
                    # (docs/ranking.md, Steps, "Request parts' coverage"): the plans only
                    _check_plans(core, query)
                    continue
                python = oracle.rank_suggestions(state, "t", replace(query, explain=True))
                assert _key(python) == _key(core), query
                if not query.intent.strip():
                    assert _key(core) == _key(_next_ranking(engine, "t", query)), query
                elif restricted:
                    weights = _sessions.context_weights(state, "t", query.context, state.clock())
                    factors = transition_factors(weights, state.ranking)
                    expected = _full_ranking(engine, "t", query, factors)
                    assert _key(core) == _key(expected), query
        finally:
            engine.close()


def _check_plans(result: SuggestResult, query: SuggestQuery) -> None:
    """Every plan part runs offered tools only (docs/ranking.md, Plans: a part is ranked with
    the request's filters)."""
    if query.available_tools is None:
        return
    for plan in result.plans:
        for tool in plan.tools:
            assert any(same_tool(tool, o) for o in query.available_tools), (query, plan)


def test_an_answer_empty_under_filters_says_what_they_removed() -> None:
    """An answer with no suggestion under `available_tools`, `tags` or `min_success` carries
    how many capabilities the request finds without them and the tools they need that the
    caller lacks (docs/ranking.md, Filters, "What the filters removed"); an answer with
    suggestions, or a request finding nothing at all, carries neither."""
    with tempfile.TemporaryDirectory() as d:
        engine = open_engine(Path(d), Clock())
        engine.record(
            "t", make_record("r1", "read the json and email it", ["read_file", "gmail_send"])
        )
        asked = SuggestQuery("read the json and email it")
        assert engine.suggest("t", asked).removed_by_filters == 0
        for query in (
            replace(asked, available_tools=("read_file",)),
            replace(asked, available_tools=()),
            replace(asked, tags=("prod",)),
        ):
            result = engine.suggest("t", query)
            assert result.suggestions == ()
            assert result.plans == ()
            assert result.removed_by_filters == 1
            expected = ("gmail_send",) if query.available_tools == ("read_file",) else ()
            if query.available_tools == ():
                expected = ("read_file", "gmail_send")
            assert result.missing_tools == expected, query
        allowed = engine.suggest("t", replace(asked, available_tools=("read_file", "gmail_send")))
        assert len(allowed.suggestions) == 1
        assert (allowed.removed_by_filters, allowed.missing_tools) == (0, ())
        nothing = engine.suggest(
            "t", replace(asked, intent="zzqx vvkw", available_tools=("read_file",))
        )
        assert (nothing.suggestions, nothing.removed_by_filters, nothing.missing_tools) == (
            (),
            0,
            (),
        )
        engine.close()
