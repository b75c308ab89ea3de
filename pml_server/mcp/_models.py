"""What the MCP tools return: pydantic models, so the SDK publishes each as the tool's
`outputSchema` and sends the value as `structuredContent`."""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic_core
from pml_client import resources_pb2
from pydantic import BaseModel, ConfigDict, Field

from pml_server.domain.caution import cautions
from pml_server.domain.limits import LIMITS

Outcome = Literal["saved", "counted", "rejected"]
_OUTCOMES: dict[int, Outcome] = {
    resources_pb2.CAPTURE_OUTCOME_SAVED: "saved",
    resources_pb2.CAPTURE_OUTCOME_COUNTED: "counted",
    resources_pb2.CAPTURE_OUTCOME_REJECTED: "rejected",
}


# A pattern as an agent reads it: its most frequent intents say what it is for; the rest
# (up to a thousand from GetPattern) would only fill the agent's context (docs/mcp.md, Protocol).
PATTERN_INTENTS = 20
# `suggest`'s text at most (docs/mcp.md, Protocol): the best capabilities that fit it; the best
# one always, its template cut to `CUT_TEMPLATE_CHARS` and its steps' arguments left out if
# it does not fit alone.
SUGGEST_TEXT_BYTES = LIMITS.mcp_suggest.bound
CUT_TEMPLATE_CHARS = 4096
_JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")


class ToolCallIn(BaseModel):
    """One tool call of the execution, in the order it ran. A member it does not have is
    refused: `{"tool": ..., "success": false}` was stored as a call that succeeded (`ok`
    defaulted to true)."""

    # `ok` and `duration_ms` are strict, as the tools' own numbers are (`_tools.py`): `ok:
    # "false"` or `0` is refused, not read as false (the docstring is the published schema's).
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(
        min_length=1, max_length=LIMITS.tool.bound, description="tool name, e.g. read_file"
    )
    ok: bool = Field(default=True, strict=True, description="whether the call succeeded")
    error: str = Field(
        default="", max_length=LIMITS.error.bound, description="error text when ok is false"
    )
    arguments: dict[str, Any] | None = Field(
        default=None, description="the call's arguments (secrets are redacted before storage)"
    )
    duration_ms: float = Field(default=0.0, strict=True, ge=0, allow_inf_nan=False)


class Parameter(BaseModel):
    name: str
    json_type: str
    secret: bool
    recent_values: list[Any] = Field(
        description="recent values, newest first (any JSON value)",
        # Typed items, so strict schema checkers accept the output schema (docs/mcp.md).
        json_schema_extra={"items": {"type": list(_JSON_TYPES)}},
    )


class Score(BaseModel):
    """The ranking's parts (docs/ranking.md)."""

    total: float
    match: float
    semantic: float
    lexical: float
    success_estimate: float
    usage: float
    recency: float
    superseded_penalty: float
    reliability: float = Field(description="failures' evidence against it, 1.0 without failures")
    steps: float = Field(
        description="how well its steps fit the tools the request asks for (1.0: no evidence)"
    )


class StepSourceOut(BaseModel):
    step: int = Field(description="index of the earlier step read")
    path: str = Field(description='path read in its output: "", .field, ["key"], [0], [*]')


class StepArgumentOut(BaseModel):
    name: str = Field(description='key or keyword, else the position ("0"...)')
    kind: Literal["parameter", "literal", "reference", "unknown"]
    parameters: list[str] = Field(description="placeholders it is built from")
    sources: list[StepSourceOut] = Field(description="earlier step outputs it reads")


class StepOut(BaseModel):
    tool: str
    arguments: list[StepArgumentOut]
    depends_on: list[int] = Field(description="earlier steps it reads; none: runs independently")
    flow_known: bool = Field(description="false inside a loop or callback, or unparsed code")


class PatternOut(BaseModel):
    name: str = Field(description="patterns/{id}")
    capability: str
    template: str = Field(description="the normalized code, literals replaced by $PLACEHOLDERS")
    original_code: str
    language: str
    tools: list[str] = Field(description="tools the pattern calls, in order")
    parameters: list[Parameter]
    parameter_schema: dict[str, Any] = Field(description="JSON schema of the placeholders")
    usage_count: int
    success_count: int
    failure_count: int
    intents: list[str] = Field(
        description="intent texts that led to this pattern, the most frequent first (at most "
        f"{PATTERN_INTENTS})"
    )
    intent_count: int = Field(description="how many distinct intents led to it")
    steps: list[StepOut] = Field(description="one per tool call, with its data flow")


class CautionOut(BaseModel):
    """Why this suggestion may not be what was asked (docs/ranking.md, Weak matches)."""

    kind: Literal["contradicts", "weak"] = Field(
        description="contradicts: its tools do another kind of action than the request's verb "
        "(a read request, a write tool); weak: a low match"
    )
    reason: str = Field(description="one sentence, for people")


class CapabilityOut(BaseModel):
    capability: str = Field(description="capabilities/{id}")
    pattern: str = Field(description="its best pattern, patterns/{id}")
    template: str
    language: str
    parameter_schema: dict[str, Any]
    tools: list[str]
    steps: list[StepOut] = Field(description="one per tool call, with its data flow")
    success: float = Field(description="estimated success rate, 0..1")
    usage_count: int
    score: Score
    cautions: list[CautionOut] = Field(
        description="why it may not be what was asked; empty when nothing is against it"
    )
    truncated: bool = Field(
        default=False,
        description="its template or steps were cut short to fit this answer: get_pattern "
        "with its pattern returns the pattern whole",
    )


class PlanPartOut(BaseModel):
    capability: CapabilityOut
    steps: list[str] = Field(description="the tools of its pattern this plan runs, in order")
    covers: list[str] = Field(description="the parts of the request it covers")


class PlanLinkOut(BaseModel):
    from_part: int = Field(description="index of the part producing the value, from 0")
    output: str
    to_part: int = Field(description="index of the part taking it")
    input: str


class PlanOut(BaseModel):
    """Stored capabilities that together cover a request none covers alone (docs/ranking.md,
    Plans)."""

    tools: list[str] = Field(description="every part's steps, in plan order")
    parts: list[PlanPartOut]
    links: list[PlanLinkOut]
    total: float
    coverage: float = Field(description="share of the request's parts covered, 0..1")


class SuggestOut(BaseModel):
    capabilities: list[CapabilityOut] = Field(description="best first; empty: nothing known")
    plans: list[PlanOut] = Field(
        default_factory=list,
        description="best first; empty when one capability covers the request",
    )
    read_as_follow_up: bool = Field(
        default=False,
        description="the intent said too little alone and was read with the previous step",
    )
    omitted: int = Field(
        default=0,
        description=f"capabilities and plans left out, the worst ranked, to keep this answer "
        f"within {SUGGEST_TEXT_BYTES} bytes of JSON: ask again with a smaller k or a narrower "
        "intent; get_pattern returns one pattern whole",
    )
    removed_by_filters: int = Field(
        default=0,
        description="with no capability: how many match the intent but need a tool not in "
        "available_tools or fall below min_success (0 when the answer has capabilities)",
    )
    missing_tools: list[str] = Field(
        default_factory=list,
        description="with removed_by_filters: the tools those capabilities need that "
        "available_tools lacks, the best match's first (at most 20)",
    )


class ToolFailureOut(BaseModel):
    tool: str
    error: str


class RecordOut(BaseModel):
    outcome: Outcome = Field(
        description="saved: a new pattern; counted: an existing pattern's counters; "
        "rejected: a new pattern with a failed call stores nothing"
    )
    pattern: str = Field(description="patterns/{id}; empty when rejected")
    capability: str
    new_pattern: bool
    tool_failures: list[ToolFailureOut]
    tool_mismatch: bool = Field(description="the code's tool calls disagree with the recorded ones")
    replayed: bool = Field(description="this request id was seen before; nothing counted twice")
    request_id: str


def _json(text: str, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


_ARG_KINDS: dict[int, Literal["parameter", "literal", "reference", "unknown"]] = {
    resources_pb2.StepArgument.KIND_PARAMETER: "parameter",
    resources_pb2.StepArgument.KIND_LITERAL: "literal",
    resources_pb2.StepArgument.KIND_REFERENCE: "reference",
}


def steps(p: resources_pb2.Pattern) -> list[StepOut]:
    return [
        StepOut(
            tool=s.tool,
            arguments=[
                StepArgumentOut(
                    name=a.name,
                    kind=_ARG_KINDS.get(a.kind, "unknown"),
                    parameters=list(a.parameters),
                    sources=[StepSourceOut(step=x.step, path=x.path) for x in a.sources],
                )
                for a in s.arguments
            ],
            depends_on=list(s.depends_on),
            flow_known=s.flow_known,
        )
        for s in p.steps
    ]


def pattern(p: resources_pb2.Pattern) -> PatternOut:
    return PatternOut(
        name=p.name,
        capability=p.capability,
        template=p.template,
        original_code=p.original_code,
        language=p.language,
        tools=list(p.tools_used),
        parameters=[
            Parameter(
                name=q.name,
                json_type=q.json_type,
                secret=q.secret,
                recent_values=[_json(v, v) for v in q.recent_values_json],
            )
            for q in p.parameters
        ],
        parameter_schema=_json(p.parameter_schema_json, {}),
        usage_count=p.usage_count,
        success_count=p.success_count,
        failure_count=p.failure_count,
        intents=[i.text for i in p.intents[:PATTERN_INTENTS]],
        intent_count=max(p.intent_count, len(p.intents)),
        steps=steps(p),
    )


def text_bytes(answer: BaseModel) -> int:
    """The bytes of `answer` as the SDK's text content gives it (JSON, indented by 2)."""
    return len(pydantic_core.to_json(answer, indent=2))


def within_budget(answer: SuggestOut) -> SuggestOut:
    """`answer` with its capabilities, then its plans, best first while its text stays within
    `SUGGEST_TEXT_BYTES`; the rest counted in `omitted`. The best capability is always kept,
    cut (`truncated`) when it does not fit alone."""
    if text_bytes(answer) <= SUGGEST_TEXT_BYTES:
        return answer
    out = answer.model_copy(update={"capabilities": [], "plans": []})
    for n, capability in enumerate(answer.capabilities):
        out.capabilities.append(capability)
        if text_bytes(out) > SUGGEST_TEXT_BYTES:
            if n > 0:
                out.capabilities.pop()
                break
            out.capabilities[0] = _cut(capability)
    for plan in answer.plans:
        out.plans.append(plan)
        if text_bytes(out) > SUGGEST_TEXT_BYTES:
            out.plans.pop()
            break
    out.omitted = (
        len(answer.capabilities) + len(answer.plans) - len(out.capabilities) - len(out.plans)
    )
    return out


def _cut(capability: CapabilityOut) -> CapabilityOut:
    steps = [s.model_copy(update={"arguments": []}) for s in capability.steps]
    template = capability.template[:CUT_TEMPLATE_CHARS]
    return capability.model_copy(update={"template": template, "steps": steps, "truncated": True})


def suggestion(s: resources_pb2.Suggestion, intent: str | None = None) -> CapabilityOut:
    """`intent`: the request it answers, for its cautions (none for a plan's part, which
    answers only a part of the request)."""
    p = s.pattern
    sc = s.score
    notes = cautions(intent, p.tools_used, sc.match) if intent is not None else []
    return CapabilityOut(
        capability=s.capability,
        pattern=p.name,
        template=p.template,
        language=p.language,
        parameter_schema=_json(p.parameter_schema_json, {}),
        tools=list(p.tools_used),
        steps=steps(p),
        success=sc.success_estimate,
        usage_count=p.usage_count,
        score=Score(
            total=sc.total,
            match=sc.match,
            semantic=sc.semantic,
            lexical=sc.lexical,
            success_estimate=sc.success_estimate,
            usage=sc.usage,
            recency=sc.recency,
            superseded_penalty=sc.superseded_penalty,
            reliability=sc.reliability,
            steps=sc.steps,
        ),
        cautions=[CautionOut(kind=c.kind, reason=c.reason) for c in notes],
        truncated=p.truncated,  # trimmed in pml's answer (docs/api.md, "Answer sizes")
    )


def plan(p: resources_pb2.Plan) -> PlanOut:
    return PlanOut(
        tools=list(p.tools),
        parts=[
            PlanPartOut(
                capability=suggestion(part.suggestion),
                steps=[part.suggestion.pattern.tools_used[s] for s in part.steps],
                covers=list(part.covers),
            )
            for part in p.parts
        ],
        links=[
            PlanLinkOut(from_part=k.from_part, output=k.output, to_part=k.to_part, input=k.input)
            for k in p.links
        ],
        total=p.score.total,
        coverage=p.score.coverage,
    )


def capture(result: resources_pb2.CaptureResult, request_id: str) -> RecordOut:
    return RecordOut(
        outcome=_OUTCOMES.get(result.outcome, "rejected"),
        pattern=result.pattern,
        capability=result.capability,
        new_pattern=result.new_pattern,
        tool_failures=[ToolFailureOut(tool=f.tool, error=f.error) for f in result.tool_failures],
        tool_mismatch=result.tool_mismatch,
        replayed=result.replayed,
        request_id=request_id,
    )
