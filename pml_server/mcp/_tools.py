"""The MCP tools: `suggest`, `record_execution`, `get_pattern`. Each validates its arguments
through its signature (the SDK names a bad field in the tool error), calls pml over gRPC and
returns a model (structured output). Numbers and booleans are strict (`strict=True`): pydantic's
lax mode would take `k: "5"` as 5 or `true` as 1, values the published schema refuses (an
integer stays a valid number)."""

from __future__ import annotations

import json
import uuid
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pml_client import resources_pb2
from pydantic import Field

from pml_server.domain.limits import LIMITS
from pml_server.mcp import _models as models
from pml_server.mcp._upstream import Upstream

_BEARER = "bearer "


def _api_key(ctx: Context, upstream: Upstream) -> str | None:
    """Over HTTP the caller's own bearer key (so the tenant is the key's, exactly as on gRPC);
    over stdio the key `pml mcp` was started with."""
    headers = ctx.headers
    if headers is None:
        return upstream.options.api_key
    value = headers.get("authorization", "")
    if value.lower().startswith(_BEARER):
        return value[len(_BEARER) :].strip() or None
    return None


def _arguments_json(index: int, arguments: dict[str, object] | None) -> str:
    """A tool call's arguments as JSON. NaN and Infinity (which the SDK's parser reads) are not
    JSON: refused, naming the call, rather than stored as `NaN` that no JSON parser but
    Python's reads back."""
    try:
        return json.dumps(arguments or {}, sort_keys=True, allow_nan=False)
    except ValueError:
        raise ToolError(
            f"invalid argument: tool_calls.{index}.arguments: NaN and Infinity are not JSON"
        ) from None


def register(server: MCPServer, upstream: Upstream) -> None:
    @server.tool(
        name="suggest",
        title="Suggest known procedures",
        description=(
            "Rank the procedures pml has seen succeed for an intent. Each capability comes "
            "with its best pattern's code template, parameter schema, tools and success rate. "
            f"The answer is kept within {models.SUGGEST_TEXT_BYTES} bytes: `omitted` counts the "
            "worst ranked left out, `truncated` a template cut short (get_pattern gives it whole)."
        ),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    def suggest(
        ctx: Context,
        intent: Annotated[
            str,
            Field(
                max_length=LIMITS.intent.bound,
                description=(
                    "what the agent wants to do; may be empty with session_id or "
                    "previous_tools: then what usually comes next"
                ),
            ),
        ],
        k: Annotated[
            int,
            Field(
                strict=True,
                ge=1,
                le=LIMITS.suggestions.bound,
                description="how many capabilities",
            ),
        ] = 5,
        available_tools: Annotated[
            list[str] | None,
            Field(description="tools reachable now; capabilities needing others are dropped"),
        ] = None,
        min_success: Annotated[
            float | None,
            Field(
                strict=True,
                ge=0,
                le=1,
                allow_inf_nan=False,
                description="minimum success estimate",
            ),
        ] = None,
        session_id: Annotated[
            str,
            Field(
                max_length=LIMITS.session_id.bound,
                description=(
                    "the session record_execution was called with: its last step's usual "
                    "next steps rank higher"
                ),
            ),
        ] = "",
        previous_tools: Annotated[
            list[str] | None,
            Field(
                max_length=LIMITS.previous_tools.bound,
                description="the tools of the agent's previous step, in call order",
            ),
        ] = None,
    ) -> models.SuggestOut:
        reply = upstream.call(
            _api_key(ctx, upstream),
            lambda c: c.suggest(
                intent,
                k,
                min_success=min_success,
                available_tools=available_tools,
                session_id=session_id,
                previous_tools=previous_tools or (),
            ),
        )
        answer = models.SuggestOut(
            capabilities=[models.suggestion(s, intent) for s in reply.suggestions],
            plans=[models.plan(p) for p in reply.plans],
            read_as_follow_up=reply.read_as_follow_up,
            removed_by_filters=reply.removed_by_filters,
            missing_tools=list(reply.missing_tools),
        )
        return models.within_budget(answer)

    @server.tool(
        name="record_execution",
        title="Record an execution",
        description=(
            "Report one finished execution (intent, code, tool calls with their outcome) so pml "
            "learns it. A new procedure with a failed tool call is rejected (nothing stored but "
            "the failures); pass the same request_id when retrying to count it once."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    def record_execution(
        ctx: Context,
        intent: Annotated[
            str,
            Field(
                min_length=1, max_length=LIMITS.intent.bound, description="what the agent was asked"
            ),
        ],
        code: Annotated[str, Field(min_length=1, description="the code that ran")],
        language: Annotated[
            str,
            Field(
                min_length=1,
                max_length=LIMITS.language.bound,
                description="e.g. typescript, python",
            ),
        ] = "typescript",
        tool_calls: Annotated[
            list[models.ToolCallIn], Field(description="tool calls in the order they ran")
        ] = [],  # noqa: B006  (pydantic copies defaults)
        request_id: Annotated[
            str | None,
            Field(
                max_length=LIMITS.request_id.bound,
                description="idempotency key; default a new UUID",
            ),
        ] = None,
        duration_ms: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] = 0.0,
        session_id: Annotated[
            str,
            Field(
                max_length=LIMITS.session_id.bound,
                description=(
                    "the agent session this run belongs to (e.g. the conversation id): pml "
                    "learns which procedure usually follows which"
                ),
            ),
        ] = "",
    ) -> models.RecordOut:
        rid = request_id or str(uuid.uuid4())
        record = resources_pb2.ExecutionRecord(
            request_id=rid,
            intent=intent,
            code=code,
            language=language,
            duration_ms=duration_ms,
            session_id=session_id,
            tool_calls=[
                resources_pb2.ToolCall(
                    tool=t.tool,
                    ok=t.ok,
                    error=t.error or ("" if t.ok else "failed"),
                    arguments_json=_arguments_json(n, t.arguments),
                    duration_ms=t.duration_ms,
                )
                for n, t in enumerate(tool_calls)
            ],
        )
        result = upstream.call(_api_key(ctx, upstream), lambda c: c.record(record))
        return models.capture(result, rid)

    @server.tool(
        name="get_pattern",
        title="Get a pattern",
        description="One pattern: template, original code, tools, parameters and counters.",
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    def get_pattern(
        ctx: Context,
        name: Annotated[
            str,
            Field(
                min_length=1,
                max_length=len("patterns/") + LIMITS.resource_id.bound,
                description="patterns/{id} or the bare id",
            ),
        ],
    ) -> models.PatternOut:
        full = name if name.startswith("patterns/") else f"patterns/{name}"
        if "/" in full.removeprefix("patterns/"):
            raise ToolError("invalid argument: name: use patterns/{id} or the bare id")
        found = upstream.call(_api_key(ctx, upstream), lambda c: c.get_pattern(full))
        return models.pattern(found)
