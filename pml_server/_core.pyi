"""Hand-written stubs for the Rust extension `pml_server._core` (source: pml_core_rs/src/python/).

Only plain scalars, strings, bytes and float32 arrays cross this boundary. Every call that does
real work releases the GIL. Every error raised derives from `CoreError`: the core raises the
classes of pml's error tree (`pml_server/domain/errors.py`), re-exported here, with the Rust
error's fields as attributes (`CoreArgumentError.field`, `.reason`). `make lint` checks this
file against the built extension (`mypy.stubtest`).
"""

from collections.abc import Sequence
from typing import Self, final

import numpy as np
from numpy.typing import NDArray

from pml_server.domain.errors import CoreArgumentError as CoreArgumentError
from pml_server.domain.errors import CoreError as CoreError
from pml_server.domain.errors import CorruptDataError as CorruptDataError
from pml_server.domain.errors import InputTooLargeError as InputTooLargeError

__all__ = [
    "COMPANION_PROFILE_BOOST",
    "HNSW_SCORE_ERROR",
    "MAX_REQUEST_PARTS",
    "MIN_SECRET_CHARS",
    "NORMALIZER_VERSION",
    "NORMALIZE_MAX_INPUT_BYTES",
    "NORMALIZE_MAX_PARAMS",
    "STEP_NEIGHBOURS",
    "CoreArgumentError",
    "CoreError",
    "CorruptDataError",
    "HnswIndex",
    "InputTooLargeError",
    "LexicalIndex",
    "Normalized",
    "Param",
    "RankParams",
    "RankTable",
    "Step",
    "StepArgument",
    "__version__",
    "beta_mean",
    "normalize",
    "parse_only",
    "pattern_semantic",
    "prepare_captures",
    "rank_next",
    "rank_query",
    "recency_factor",
    "redact_name",
    "same_tool",
    "sha256_tagged",
]

__version__: str

def sha256_tagged(data: bytes) -> str:
    """Return `"sha256:<64 lowercase hex>"` of `data` (GIL released)."""

@final
class HnswIndex:
    """Approximate nearest-neighbour index (HNSW) over cosine similarity, keyed by uint64 ids.

    Vectors are normalized on insert and stored in half precision (half the memory of f32): a
    score is the f32 query against the stored row, within `HNSW_SCORE_ERROR` of the exact
    cosine, computed the same way by every call. Searches share a read lock and run in
    parallel; writes are exclusive (long `add` batches yield to searches every 256 rows). The
    GIL is released in every call that does work. Removed ids are never returned; their nodes
    are dropped by `compact`, which also runs on its own once removed nodes reach a third of
    the graph.
    """

    def __new__(
        cls, dim: int, *, m: int = 16, ef_construction: int = 200, ef_search: int = 64
    ) -> Self: ...
    @property
    def dim(self) -> int: ...
    @property
    def m(self) -> int: ...
    @property
    def ef_construction(self) -> int: ...
    @ef_construction.setter
    def ef_construction(self, value: int) -> None: ...
    @property
    def ef_search(self) -> int: ...
    @ef_search.setter
    def ef_search(self, value: int) -> None: ...
    @property
    def exact(self) -> bool:
        """Whether every search without `allow` scans every live vector exactly (exact
        recall; the engine's `vector_index = "exact"`). A search setting, not kept in
        snapshots; False for a new or restored index."""
    @exact.setter
    def exact(self, value: bool) -> None: ...
    @property
    def kernel(self) -> str:
        """Distance kernel picked for this CPU: "avx2+fma+f16c" or "scalar"."""
    def add(self, ids: NDArray[np.uint64], vectors: NDArray[np.float32], threads: int = 1) -> None:
        """Add rows of `vectors` (n, dim) under `ids` (n,); re-adding an id replaces it. The whole
        batch is validated first: wrong shape, zero or non-finite rows raise
        CoreArgumentError naming the field and nothing is added. With `threads` > 1 the
        searches of a batch of new ids run on that many threads (1..=64; the GIL is released)."""
    def remove(self, ids: NDArray[np.uint64], *, compact: bool = True) -> int:
        """Remove ids; returns how many were present. With `compact`, a graph then worn by
        its tombstones is compacted before this returns, on a copy: searches and writes wait
        only for the copy and the swap (the GIL is released); without, the caller compacts
        later (`compact_if_worn`)."""
    def compact_if_worn(self) -> bool:
        """Compact (on a copy, as `remove`) when tombstones make up a third of the graph;
        returns whether it did (False too while another compaction runs)."""
    def contains(self, id: int) -> bool: ...
    def __contains__(self, id: int, /) -> bool: ...
    def search(
        self,
        query: NDArray[np.float32],
        k: int,
        ef: int | None = None,
        allow: NDArray[np.uint64] | None = None,
    ) -> tuple[NDArray[np.uint64], NDArray[np.float32]]:
        """Top `k` (ids, cosine similarities), best first; fewer when fewer exist or are allowed.
        `allow` restricts results to those ids; small allowed sets are searched exactly."""
    def search_batch(
        self,
        queries: NDArray[np.float32],
        k: int,
        ef: int | None = None,
        allow: NDArray[np.uint64] | None = None,
        *,
        num_threads: int = 1,
    ) -> list[tuple[NDArray[np.uint64], NDArray[np.float32]]]:
        """`search` for each row of `queries` (n, dim), split over `num_threads` threads."""
    def compact(self) -> None:
        """Rebuild the graph without removed nodes, releasing their memory; on a copy, as
        `remove` compacts (nothing while another compaction runs)."""
    def memory_bytes(self) -> int: ...
    def __len__(self) -> int: ...
    def to_bytes(self) -> bytes:
        """Versioned, checksummed serialization."""
    @staticmethod
    def from_bytes(data: bytes) -> HnswIndex:
        """Inverse of `to_bytes`; truncated or corrupted bytes raise CorruptDataError."""

# --- lexical index (pml_core_rs/src/lexical) ---

@final
class LexicalIndex:
    """BM25 inverted index (Okapi, Lucene idf, live average document length) over term lists
    tokenized by the caller, keyed by non-empty str ids. Searches share a read lock and run in
    parallel; updates are exclusive; the GIL is released in every call that does work.
    `pml_server.ranking.LexicalIndex` wraps it with the tokenizer."""

    def __new__(cls, k1: float = 1.2, b: float = 0.75) -> Self:
        """CoreArgumentError naming `k1` (must be finite, >= 0) or `b` (0..1)."""
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> float: ...
    def add(self, doc_id: str, terms: list[str]) -> None:
        """Index `terms` (one entry per occurrence) under `doc_id`, replacing what it held."""
    def add_terms(self, doc_id: str, terms: list[str]) -> None:
        """Add `terms` to `doc_id`, created (possibly empty) if new."""
    def remove_terms(self, doc_id: str, terms: list[str]) -> None:
        """Take one occurrence per entry of `terms` out of `doc_id`; the document goes once it
        holds no term. Unknown ids and terms do nothing."""
    def remove(self, doc_id: str) -> bool:
        """Forget `doc_id`; returns whether it was there."""
    def renumber(self, order: list[str]) -> None:
        """Number the documents named in `order` first, in that order, the others after them
        as they were (unknown or repeated names ignored): searches walk documents in number
        order, so related documents numbered together are read from nearby memory. Answers
        and their score bits do not change."""
    def search(
        self, terms: list[str], limit: int, *, exhaustive: bool = False
    ) -> list[tuple[str, float]]:
        """The `limit` best (doc_id, score > 0) for the distinct `terms` (scores summed in their
        order), best first, equal scores by doc_id ascending. Terms too common to change the
        result are skipped; `exhaustive=True` scans them all (same result; a bench baseline)."""
    def search_among(
        self, terms: list[str], limit: int, allowed: list[str]
    ) -> list[tuple[str, float]]:
        """`search` among the `allowed` documents alone (every posting of the terms scanned)."""
    def __len__(self) -> int: ...
    def __contains__(self, doc_id: object, /) -> bool: ...

# --- ranking (pml_core_rs/src/ranking, docs/ranking.md) ---

@final
class RankParams:
    """The formula's parameters (the RankingConfig fields of the same names); frozen."""

    def __new__(
        cls,
        *,
        semantic_weight: float,
        lexical_weight: float,
        lexical_half_score: float,
        prior_successes: float,
        prior_failures: float,
        expected_success_rate: float,
        reliability_prior_strength: float,
        usage_weight: float,
        usage_saturation: float,
        recency_full_days: float,
        recency_half_life_days: float,
        recency_floor: float,
        superseded_penalty: float,
        step_weight: float = 0.3,
        step_profile_weight: float = 0.8,
        step_gate: float = 1.0,
        step_coverage_weight: float = 0.6,
        step_order_weight: float = 0.2,
    ) -> Self:
        """InvalidArgumentError naming `params` if one is not finite or expected_success_rate
        is not in (0, 1], naming `step_weight`, `step_profile_weight`, `step_gate`,
        `step_coverage_weight` or `step_order_weight` if it is not in [0, 1]."""

STEP_NEIGHBOURS: int
"""How many of a request's nearest intents vote for their tools (docs/ranking.md, Steps)."""

MAX_REQUEST_PARTS: int
"""The most request parts `rank_query` and `RankTable.step_factors` accept."""

COMPANION_PROFILE_BOOST: float
"""The tool profiles' weight for a request ranked in the cross-lingual companion's space is
`step_profile_weight` times this, at most 1 (docs/ranking.md, Other languages, "Tool profiles
in the companion's space")."""

@final
class RankTable:
    """One tenant's ranking table: per pattern its capability, tools, retention marks,
    counters and tags, and the intent ids standing for it in the vector index. Updates take a
    write lock; `rank_query` reads it without the GIL."""

    def __new__(cls) -> Self: ...
    def set_pattern(
        self,
        pattern_id: str,
        capability_id: str,
        tools: list[str],
        flagged: bool,
        superseded: bool,
        tool_words: list[list[str]] | None = None,
    ) -> None:
        """The pattern record's part of the row (created if new); `tool_words`: each tool's
        analysed name words (InvalidArgumentError naming it unless one list per tool)."""
    def step_factors(
        self,
        hit_ids: list[int],
        hit_scores: list[float],
        pattern_ids: list[str],
        words: list[str],
        params: RankParams,
        ann: HnswIndex | None,
        query: NDArray[np.float32],
        companion: bool = False,
        parts: Sequence[object] | None = None,
        part_weights: list[float] = ...,
        ordered: bool = False,
    ) -> list[float]:
        """The step factor of each pattern (1.0 without a row), gated by the hits' expected step
        count (docs/ranking.md, Steps, "Gate"), for a request whose `STEP_NEIGHBOURS` nearest
        intents are these hits, whose analysed words are `words` and whose vector is `query`;
        the tool profiles are first brought up to date from `ann` (`companion`: the
        cross-lingual companion's index, whose profiles are kept apart; None: `query` is not in
        one profiles' space, every profile factor is 1; docs/ranking.md, Steps, "Tool
        profiles"; Other languages); `parts` and `part_weights`: the request's parts, as
        `rank_query` reads them."""
    def profiles_stale(self) -> bool:
        """Some tool profile is out of date."""
    def set_counters(
        self,
        pattern_id: str,
        successes: int,
        failures: int,
        usage: int,
        last_used_ms: int,
        tags: list[str],
    ) -> None:
        """The counters record's part of the row (created if new)."""
    def remove_pattern(self, pattern_id: str) -> bool:
        """Forget the record and counters parts; returns whether the row was there."""
    def link_intent(self, intent_id: int, pattern_id: str) -> None:
        """The intent stands for the pattern in the vector index (a replay does nothing)."""
    def unlink_intents(self, intent_ids: list[int]) -> None:
        """The intents left the vector index; unknown ids do nothing."""
    def pattern_of(self, intent_id: int) -> str | None:
        """The pattern an intent stands for, if linked."""
    def intents_of(self, pattern_id: str) -> list[int]:
        """The intents linked to a pattern, in link order (empty if none)."""
    def memory_bytes(self) -> int: ...
    def followers(
        self, previous: list[str], limit: int
    ) -> list[tuple[list[str], list[tuple[int, int]]]]:
        """Each set of tools a stored workflow showed following a step whose tools are
        `previous` (in call order): (its capability ids, the (successes, last use in ms) of each
        workflow that taught it), from at most `limit` workflows, those with the most successes
        (docs/ranking.md, Sessions, "Workflows")."""
    def step_capabilities(self, previous: list[str]) -> list[str]:
        """The capabilities standing for a step whose tools are `previous` (in call order):
        those whose tools are the step's, each with or without its server's namespace, else
        (several tools) those of its last tool alone; sorted (docs/ranking.md, Sessions)."""
    def step_profile(
        self, previous: list[str], ann: HnswIndex, companion: bool = False
    ) -> list[float] | None:
        """The previous step's vector for a follow-up request: the mean of the profiles of the
        tools it ran (`previous`, each with or without its server's namespace) in `ann`'s space
        (`companion`: the cross-lingual companion's), unit length, brought up to date first;
        None when none of them has one (docs/ranking.md, Sessions, "Follow-up requests")."""
    def permitted(
        self,
        params: RankParams,
        *,
        min_success: float,
        include_flagged: bool,
        available_tools: list[str] | None,
        tags: list[str],
    ) -> tuple[list[str], list[int]] | None:
        """(pattern ids, their intents) of the rankable patterns the context filters permit
        (flagged, available_tools, tags, min_success), or None when they permit all of them."""
    def __len__(self) -> int: ...

_Parts = tuple[float, float, float, float, float, float, float, float, float, float, float]
_Ranked = tuple[str, str, _Parts]
_Filtered = tuple[str, str, str, str, _Parts]

def rank_query(
    table: RankTable,
    ann: HnswIndex,
    lexical: LexicalIndex,
    query: object,
    terms: list[str],
    limit: int,
    k: int,
    params: RankParams,
    now_ms: int,
    *,
    min_match: float,
    min_success: float,
    include_flagged: bool,
    available_tools: list[str] | None,
    tags: list[str],
    own_min_success: bool = False,
    words: list[str] = ...,
    transitions: dict[str, float] | None = None,
    explain: bool = False,
    primary: bool = True,
    foreign_ann: HnswIndex | None = None,
    foreign_query: object | None = None,
    foreign_ids: list[int] = ...,
    parts: Sequence[object] | None = None,
    part_weights: list[float] = ...,
    ordered: bool = False,
) -> tuple[list[_Ranked], list[_Filtered]]:
    """One Suggest query, GIL released: `limit` nearest intents and `limit` best lexical
    documents, each retrieved pattern's best cosine over all its intents, the formula, the
    filters (flagged, available_tools, tags, min_match, min_success), grouping by capability
    and the top `k`, as (pattern id, capability id, (match, semantic, lexical, success
    estimate, usage, recency, superseded penalty, total, reliability, steps, transition)),
    best first. `words`: the request's analysed words in the order of their
    first use, for the step fit (docs/ranking.md, Steps); `ordered`: the request states the
    order of its steps, for the order fit ("Order of the steps"). `transitions`: the session
    signal's factor by capability id, multiplied into the total of that capability's patterns
    (docs/ranking.md, Sessions). With `available_tools`, `tags` or `own_min_success` (the
    request named its own min_success) both searches run among the permitted patterns alone
    (`RankTable.permitted`; a permitted set of at most 1024 intents is scored whole).

    The vectors (docs/ranking.md, Other languages): `ann` is the tenant's own index, whose
    vectors the tool profiles are means of, unless `primary` is False (the companion's index
    and `query` in its space: no profile factor); with `foreign_ann` and `foreign_query` (both
    or neither, else InvalidArgumentError naming the missing one), the intents `foreign_ids`
    are scored in that index with that vector instead, the others in `ann` (no profile factor
    either).

    `parts` and `part_weights`: the request's parts (docs/ranking.md, Steps, "Request parts'
    coverage"), one vector of the query's dimension per weight (finite, >= 0), at most
    `MAX_REQUEST_PARTS`, else InvalidArgumentError naming the field; in the space the tool
    profiles are read in (`query`'s, or `foreign_query`'s with `foreign_ann`).

    The second list is empty unless `explain`: then every other candidate retrieved (with an
    allow-list, the unrestricted shortlist's too) as (pattern id, capability id, rule, detail,
    score parts): those failing a filter (rule: its name) or whose capability a better pattern
    represents (`same_capability`) in score order, then the capabilities after the k-th
    (`beyond_k`)."""

def rank_next(
    table: RankTable,
    pattern_ids: list[str],
    weights: dict[str, float],
    k: int,
    params: RankParams,
    now_ms: int,
    *,
    min_success: float,
    include_flagged: bool,
    available_tools: list[str] | None,
    tags: list[str],
    explain: bool = False,
) -> tuple[list[_Ranked], list[_Filtered]]:
    """What usually comes next (docs/ranking.md, Sessions), GIL released: the rankable
    patterns among `pattern_ids` (each once), total = the weight of their capability in
    `weights` (0 for another) x reliability x usage x recency x superseded penalty, match 0,
    every filter but min_match; answered as `rank_query`."""

def pattern_semantic(cosines: list[float]) -> float:
    """A pattern's semantic part from its intents' cosines: the weighted mean of the best three
    (weights 1, 0.25, 0.0625), at least 0; 0.0 without cosines (docs/ranking.md, Pipeline)."""

def same_tool(a: str, b: str) -> bool:
    """Whether two names are one tool, with or without its server's namespace: split at `:`,
    `__`, `/` and `.` (a leading `mcp` aside), the segments of one end the other's."""

def recency_factor(last_used_ms: int, now_ms: int, params: RankParams) -> float:
    """The formula's recency factor: 1.0 while unused for at most recency_full_days, then
    halving every half-life, floored at recency_floor."""

def beta_mean(
    successes: int, failures: int, prior_successes: float, prior_failures: float
) -> float:
    """(s + a) / (s + f + a + b): the Beta(a, b) posterior mean after s successes and f
    failures (negative counts read as 0), the formula's success estimate."""

# --- code normalization (pml_core_rs/src/normalize, docs/normalization.md) ---

HNSW_SCORE_ERROR: float
"""How far an `HnswIndex` score may be from the exact f32 cosine: vectors are stored in half
precision (pml_core_rs/src/index/half.rs)."""
NORMALIZER_VERSION: int
"""Version of the normalization rules; hashed into every `code_hash`."""
NORMALIZE_MAX_INPUT_BYTES: int
NORMALIZE_MAX_PARAMS: int
MIN_SECRET_CHARS: int
"""`prepare_captures` redacts a flagged secret value from free text only from this many
characters on (shorter ones would blank ordinary words and numbers)."""
"""Largest `code` in UTF-8 bytes that `normalize`/`parse_only` accept (else InputTooLargeError)."""

@final
class Param:
    """One placeholder of a template (frozen)."""

    @property
    def name(self) -> str:
        """`$PATH`, `$LIMIT_2`, `$READ_FILE_ARG0`, `$STR`, ..."""
    @property
    def json_type(self) -> str:
        """`"string"`, `"integer"` or `"number"`."""
    @property
    def value_json(self) -> str:
        """The literal's decoded value as JSON text, e.g. `"\\"a.json\\""` or `"5"`."""
    @property
    def start(self) -> int:
        """Start of the literal in `code`, in Python str indices (code points)."""
    @property
    def end(self) -> int:
        """End (exclusive) of the literal in `code`, in Python str indices."""
    @property
    def secret(self) -> bool:
        """The value looks like a credential: store it only as `[REDACTED]`."""

@final
class Normalized:
    """Result of `normalize` (frozen)."""

    @property
    def language(self) -> str:
        """`"javascript"`, `"typescript"`, `"python"`, or the lowercased input for others."""
    @property
    def template(self) -> str:
        """The code with each parameter literal replaced by its placeholder name."""
    @property
    def redacted_code(self) -> str:
        """The code with secret literals and credential-shaped text redacted (what is stored)."""
    @property
    def code_hash(self) -> str:
        """`"sha256:<64 hex>"` of the canonical form: the pattern's identity."""
    @property
    def params(self) -> list[Param]:
        """One entry per placeholder, in source order."""
    @property
    def tool_calls(self) -> list[str]:
        """Tool names the code calls statically, in source order (`"read_file"`, `"gmail:send"`)."""
    @property
    def parse_ok(self) -> bool:
        """False when the token-level fallback produced this result."""
    @property
    def fallback_reason(self) -> str:
        """Why the fallback was used; `""` when `parse_ok`."""
    @property
    def schema_json(self) -> str:
        """JSON Schema (object, one property per placeholder name) of the template's inputs."""
    @property
    def steps(self) -> list[Step]:
        """One step per tool call, in the order of `tool_calls` (docs/normalization.md, Steps)."""

@final
class StepArgument:
    """One argument of a step and where its value comes from (frozen)."""

    @property
    def name(self) -> str:
        """The key or keyword it is passed under, else its position ("0"...); "..." for a spread."""
    @property
    def kind(self) -> str:
        """`"parameter"`, `"literal"`, `"reference"` or `"unknown"`."""
    @property
    def parameters(self) -> list[str]:
        """Placeholder names it is built from, in source order."""
    @property
    def sources(self) -> list[tuple[int, str]]:
        """(step index, path) of each earlier step output it reads."""

@final
class Step:
    """One tool call of a snippet (frozen)."""

    @property
    def tool(self) -> str:
        """The tool called, as in `Normalized.tool_calls`."""
    @property
    def arguments(self) -> list[StepArgument]:
        """Its arguments in the order written (at most 64)."""
    @property
    def depends_on(self) -> list[int]:
        """Indexes of the steps whose outputs it reads, ascending."""
    @property
    def flow_known(self) -> bool:
        """False inside a loop or a callback, or when the code was not parsed."""

def normalize(code: str, language: str, *, with_steps: bool = True) -> Normalized:
    """Normalize agent code (GIL released); `steps` is read only `with_steps` (empty otherwise:
    the capture path skips them, they are derived on read). Aliases: js/javascript/mjs/cjs/jsx,
    ts/typescript/mts/cts/tsx, py/python. Other languages and unparsable or too deeply nested
    code use the deterministic token-level fallback. Raises InputTooLargeError over
    NORMALIZE_MAX_INPUT_BYTES and CoreArgumentError for a str with lone surrogates."""

def redact_name(name: str) -> str:
    """`name` (a tool's, a tag, an identifier a caller gives) with its credentials redacted by
    the rules for names, as `prepare_captures` writes them in free text: a URL's user-info with
    a password (`scheme://[REDACTED]@host`; `ssh://git@host` is kept), the value of a query
    parameter or a `name=value` pair named as a credential (`?access_token=[REDACTED]`,
    `password=[REDACTED]`) and a token with a credential's shape (a known prefix, a JWT, a
    `Bearer` token, a PEM block). Not the entropy rule: a name that merely looks random (a
    commit hash) is kept. GIL released; `name` itself when there is nothing to redact (a name
    with a lone surrogate that has one comes back with its surrogates replaced by U+FFFD)."""

def parse_only(code: str, language: str) -> bool:
    """Parse with the same parser as `normalize` and do nothing else (benchmark baseline; GIL
    released). True when the code parsed without syntax errors; False for other languages."""

def prepare_captures(
    items: list[tuple[str, str, list[str]]],
) -> list[tuple[Normalized, list[str]] | Exception]:
    """For each `(code, language, texts)`, in order: `normalize(code, language)` and each text
    with the decoded values of the result's secret parameters (those of at least
    MIN_SECRET_CHARS characters, longest first) replaced by `[REDACTED]`, then every
    credential-shaped token too. One call for the whole batch, GIL released once. An input
    `normalize` would refuse (or whose texts are not strs encodable as UTF-8) gets the
    exception instance in its place; the others are unaffected."""
