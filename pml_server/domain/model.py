"""Domain types exchanged between the engine (capture, ranking, retention) and the API layer.

Times are integer milliseconds since the Unix epoch; ids are opaque strings; JSON payloads
travel as JSON text so this module stays free of any serialization library.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from pml_server.domain.vectors import CheckedVector

T = TypeVar("T")


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an execution, as the agent's runtime observed it."""

    tool: str
    arguments_json: str = "{}"
    ok: bool = True
    error: str = ""
    started_at_ms: int = 0
    duration_ms: float = 0.0


class ExecutionStatus(Enum):
    SUCCESS = "success"
    FAILURE = "failure"


@dataclass(frozen=True)
class ExecutionRecord:
    """One finished execution to capture. The tenant is never part of it: it comes from the
    caller's credentials and is passed beside the record."""

    request_id: str
    intent: str
    code: str
    language: str
    tool_calls: tuple[ToolCall, ...] = ()
    status: ExecutionStatus = ExecutionStatus.SUCCESS
    started_at_ms: int = 0
    duration_ms: float = 0.0
    trace: bytes = b""
    # Optional client-supplied intent vector (the API edge hands it over already checked and
    # normalized); when absent the server's embedder computes it.
    intent_embedding: tuple[float, ...] | CheckedVector | None = None
    tags: tuple[str, ...] = ()
    # The agent session it belongs to (docs/ranking.md, Sessions); "" for none.
    session_id: str = ""


class CaptureOutcome(Enum):
    SAVED = "saved"  # a new pattern was stored
    COUNTED = "counted"  # an existing pattern's counters were updated (success or failed try)
    REJECTED = "rejected"  # a new pattern with a failed tool call: nothing stored (all-or-nothing)


@dataclass(frozen=True)
class ToolFailure:
    tool: str
    error: str


@dataclass(frozen=True)
class CaptureResult:
    outcome: CaptureOutcome
    pattern_id: str = ""
    capability_id: str = ""
    new_pattern: bool = False
    tool_failures: tuple[ToolFailure, ...] = ()
    # The code's statically read tool calls disagree with the recorded ones.
    tool_mismatch: bool = False
    # True when this answer is the stored result of an earlier call with the same request id.
    replayed: bool = False


@dataclass(frozen=True)
class IntentView:
    id: str
    text: str
    hit_count: int
    last_seen_ms: int


@dataclass(frozen=True)
class ParamView:
    """One placeholder of a pattern's template."""

    name: str
    json_type: str
    secret: bool
    # Most recent values seen (JSON text each), newest first; secrets as "[REDACTED]".
    recent_values_json: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepArgumentView:
    """One argument of a step (docs/normalization.md, Steps)."""

    name: str
    kind: str  # "parameter" | "literal" | "reference" | "unknown"
    parameters: tuple[str, ...] = ()
    # (step index, path read in its output) pairs.
    sources: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class StepView:
    """One tool call of a pattern, with the earlier steps it reads."""

    tool: str
    arguments: tuple[StepArgumentView, ...] = ()
    depends_on: tuple[int, ...] = ()
    flow_known: bool = True


@dataclass(frozen=True)
class PatternView:
    id: str
    code_hash: str
    template: str
    original_code: str
    language: str
    tools_used: tuple[str, ...]
    params: tuple[ParamView, ...]
    parameter_schema_json: str
    usage_count: int
    success_count: int
    failure_count: int
    first_seen_ms: int
    last_used_ms: int
    mean_duration_ms: float
    capability_id: str
    intents: tuple[IntentView, ...] = ()
    flagged_for_removal: bool = False
    superseded_by: str = ""  # pattern id of the pattern that beats this one, if any
    tool_mismatch_count: int = 0
    steps: tuple[StepView, ...] = ()
    # How many intents the pattern has (`intents` shows the most hit ones, at most
    # `shown_intents.SHOWN_INTENTS` when read for Suggest, GetPattern or ListPatterns).
    intent_count: int = 0


@dataclass(frozen=True)
class CapabilityView:
    id: str
    tools: tuple[str, ...]
    pattern_ids: tuple[str, ...]  # at most MAX_CAPABILITY_PATTERNS, the best first
    pattern_count: int  # every member
    best_pattern_id: str
    intents: tuple[str, ...]
    usage_count: int
    success_count: int
    failure_count: int
    last_used_ms: int


@dataclass(frozen=True)
class SuggestContext:
    """The agent's previous step (docs/ranking.md, Sessions): the first of `previous_patterns`
    (its last entry), `previous_tools` (one step's tools, in call order) and the session's last
    recorded step that is given decides."""

    session_id: str = ""
    previous_patterns: tuple[str, ...] = ()
    previous_tools: tuple[str, ...] = ()

    def names_a_step(self) -> bool:
        return bool(self.session_id or self.previous_patterns or self.previous_tools)


@dataclass(frozen=True)
class SuggestQuery:
    """A suggestion request. `None` means "use the server default" for every threshold."""

    intent: str
    k: int = 5
    intent_embedding: tuple[float, ...] | CheckedVector | None = None
    min_match: float | None = None
    min_success: float | None = None
    include_flagged: bool = False
    available_tools: tuple[str, ...] | None = None  # None: no restriction
    tags: tuple[str, ...] = ()
    explain: bool = False
    plan_size: int = 3  # most plans (docs/ranking.md, Plans); 0 turns plans off
    context: SuggestContext | None = None  # what the agent just did (docs/ranking.md, Sessions)


@dataclass(frozen=True)
class ScoreParts:
    """A suggestion's score broken into the parts of the documented ranking formula."""

    match: float  # fused relevance, 0..1
    semantic: float  # cosine of the best intent mapping
    lexical: float  # normalized lexical score
    success_estimate: float  # small-sample-aware success rate (what min_success compares)
    usage: float  # bounded usage tie-break, within [1 - usage_weight, 1]
    recency: float  # 1.0 up to 90 days unused, then decaying
    superseded_penalty: float  # 1.0 unless superseded
    total: float
    reliability: float = 1.0  # failures' evidence against the pattern; 1.0 without failures
    steps: float = 1.0  # how well its steps fit the tools the request asks for; 1.0: no evidence
    transition: float = 1.0  # the session signal (docs/ranking.md, Sessions); 1.0 without one


@dataclass(frozen=True)
class Suggestion:
    capability_id: str
    pattern: PatternView
    score: ScoreParts


@dataclass(frozen=True)
class FilteredCandidate:
    """A candidate the filters removed; `rule` is the filter's name (e.g. `min_success`)."""

    capability_id: str
    pattern_id: str
    rule: str
    detail: str
    score: ScoreParts | None = None


@dataclass(frozen=True)
class PlanLink:
    """Part `from_part`'s output `output` fits part `to_part`'s input `input`."""

    from_part: int
    output: str
    to_part: int
    input: str


@dataclass(frozen=True)
class PlanScore:
    """A plan's score broken into the parts of its formula (docs/ranking.md, Plans)."""

    coverage: float
    part_match: tuple[float, ...]
    part_reliability: tuple[float, ...]
    extra_part_cost: float
    unlinked_inputs: int
    unlinked_input_cost: float
    total: float
    best_single: float


@dataclass(frozen=True)
class PlanPart:
    suggestion: Suggestion
    covers: tuple[int, ...]  # indexes of the request parts it covers, ascending
    steps: tuple[int, ...]  # indexes into the pattern's tools_used the plan runs

    @property
    def tools(self) -> tuple[str, ...]:
        used = self.suggestion.pattern.tools_used
        return tuple(used[n] for n in self.steps)


@dataclass(frozen=True)
class Plan:
    parts: tuple[PlanPart, ...]
    links: tuple[PlanLink, ...]
    score: PlanScore
    request_parts: tuple[str, ...]  # the request split into parts (what `covers` indexes)

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(t for p in self.parts for t in p.tools)


@dataclass(frozen=True)
class SuggestResult:
    suggestions: tuple[Suggestion, ...]
    filtered: tuple[FilteredCandidate, ...] = ()
    plans: tuple[Plan, ...] = ()
    # read with the agent's previous step (docs/ranking.md, Sessions, "Follow-up requests")
    read_as_follow_up: bool = False
    # empty under its filters: how many capabilities the request finds without them, and the
    # tools those need that `available_tools` lacks (docs/ranking.md, Filters, "What the
    # filters removed")
    removed_by_filters: int = 0
    missing_tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailureEntry:
    request_id: str
    tool: str
    error: str
    intent: str
    code_hash: str
    pattern_id: str  # empty when the failed code was never a stored pattern
    time_ms: int


class RetentionAction(Enum):
    REMOVAL_CANDIDATE = "removal_candidate"
    REMOVED = "removed"
    STALE = "stale"
    SUPERSEDED = "superseded"


@dataclass(frozen=True, slots=True)
class RetentionRow:
    """What retention evaluates of a pattern: its ids and the counters the policy reads, read
    without its code (docs/ranking.md, Retention)."""

    id: str
    capability_id: str
    success_count: int
    failure_count: int
    last_used_ms: int


@dataclass(frozen=True)
class RetentionEntry:
    pattern_id: str
    action: RetentionAction
    reason: str
    superseded_by: str = ""


@dataclass(frozen=True)
class RetentionReport:
    dry_run: bool
    entries: tuple[RetentionEntry, ...]
    ran_at_ms: int


@dataclass(frozen=True)
class Stats:
    patterns: int
    capabilities: int
    intents: int
    executions: int  # captures counted (successes + failed tries of known patterns)
    rejected: int  # executions of new patterns refused by the all-or-nothing rule
    failures_logged: int


@dataclass(frozen=True)
class EmbeddingUsage:
    """What the model has cost since the server started (`MeteredEmbedder` counts it)."""

    runs: int = 0  # model calls (a batch of texts is one)
    texts: int = 0
    cpu_seconds: float = 0.0
    seconds: float = 0.0  # wall time inside the model


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing. `next_cursor` is an opaque engine cursor ("" at the end); the API
    layer wraps it in a signed, tenant-bound page token."""

    items: tuple[T, ...]
    next_cursor: str = ""


@dataclass(frozen=True)
class PageRequest:
    page_size: int = 50
    cursor: str = ""


__all__ = [
    "CapabilityView",
    "CaptureOutcome",
    "CaptureResult",
    "ExecutionRecord",
    "ExecutionStatus",
    "FailureEntry",
    "FilteredCandidate",
    "IntentView",
    "Page",
    "PageRequest",
    "ParamView",
    "PatternView",
    "RetentionAction",
    "RetentionEntry",
    "RetentionReport",
    "ScoreParts",
    "Stats",
    "SuggestQuery",
    "SuggestResult",
    "Suggestion",
    "ToolCall",
    "ToolFailure",
]
