"""What `pml mcp` serves beyond tools (docs/mcp.md, Resources and prompt):

- a resource per stored capability, `pml://capabilities/{id}`: listed a page at a time (the
  cursor is pml's page token), read as JSON (the capability and its best pattern);
- the prompt `use_procedure`: the best known procedure for a task, turned into instructions
  an agent can follow (or, when pml knows none, how to record the one it writes).

Each call uses the caller's key, as the tools do (over HTTP the bearer key, so the tenant is
the key's)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio.to_thread
import grpc
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    ListResourcesResult,
    PaginatedRequestParams,
    Resource,
)
from pml_client import pml_pb2, resources_pb2
from pydantic import Field

from pml_server.client import PmlClient, PmlClientError
from pml_server.domain.caution import cautions
from pml_server.domain.limits import LIMITS
from pml_server.mcp import _models as models
from pml_server.mcp._message_limit import shown
from pml_server.mcp._tools import _api_key
from pml_server.mcp._upstream import Upstream

URI_PREFIX = "pml://capabilities/"
_PAGE = 100
T = TypeVar("T")


async def _with_client(upstream: Upstream, key: str | None, fn: Callable[[PmlClient], T]) -> T:
    """`fn` with the key's client, in a worker thread (a gRPC call blocks)."""

    def call() -> T:
        with upstream.lease(key) as client:
            return fn(client)

    return await anyio.to_thread.run_sync(call)


def _listed(c: resources_pb2.Capability) -> Resource:
    cid = c.name.removeprefix("capabilities/")
    intents = "; ".join(c.intents[:3])
    return Resource(
        uri=f"{URI_PREFIX}{cid}",
        name=cid,
        title=" > ".join(c.tools),
        description=f"{c.success_count} of {c.usage_count} runs succeeded; intents: {intents}",
        mime_type="application/json",
    )


async def list_capabilities(
    upstream: Upstream, ctx: Context, params: PaginatedRequestParams | None
) -> ListResourcesResult:
    token = params.cursor if params is not None and params.cursor else ""
    try:
        page = await _with_client(
            upstream, _api_key(ctx, upstream), lambda c: c.list_capabilities(_PAGE, token)
        )
    except PmlClientError as err:
        raise _protocol_error(upstream, err) from None
    return ListResourcesResult(
        resources=[_listed(c) for c in page.capabilities],
        next_cursor=page.next_page_token or None,
    )


def _protocol_error(
    upstream: Upstream, err: PmlClientError, renamed: dict[str, str] | None = None
) -> MCPError:
    """pml's refusal as a JSON-RPC error: -32602 Invalid params for a bad argument (a cursor
    pml did not issue), else -32603 Internal error, each with one sentence (the SDK answered
    error code 0, and logged a traceback for each). `renamed`: the caller's argument for a
    request field of another name (the prompt's `task` is Suggest's `intent`)."""
    code = INVALID_PARAMS if err.code is grpc.StatusCode.INVALID_ARGUMENT else INTERNAL_ERROR
    if renamed and err.violations:
        named = [(renamed.get(f, f), d) for f, d in err.violations]
        err = PmlClientError(err.code, err.message, named, err.retry_delay_seconds)
    return MCPError(code, upstream.describe(err))


def _capability_json(c: resources_pb2.Capability, best: resources_pb2.Pattern) -> str:
    body: dict[str, Any] = {
        "capability": c.name,
        "tools": list(c.tools),
        "intents": list(c.intents),
        "patterns": list(c.patterns),
        "pattern_count": c.pattern_count,
        "usage_count": c.usage_count,
        "success_count": c.success_count,
        "failure_count": c.failure_count,
        "best_pattern": models.pattern(best).model_dump(mode="json"),
    }
    return json.dumps(body, ensure_ascii=False, indent=2)


def _instructions(intent: str, reply: pml_pb2.SuggestResponse) -> str:
    if not reply.suggestions:
        return (
            f"Task: {intent}\n\npml knows no procedure for this task yet. Write the code, run "
            "it, then call `record_execution` with the task, the code and each tool call's "
            "outcome, so the next agent can reuse it."
        )
    s = reply.suggestions[0]
    p = s.pattern
    lines = [
        f"Task: {intent}",
        "",
        f"pml knows a procedure that worked before ({p.success_count} of {p.usage_count} runs "
        f"succeeded; match {s.score.match:.2f}): {p.name}, capability {s.capability}.",
    ]
    for note in cautions(intent, p.tools_used, s.score.match):
        lines.append(f"Caution: {note.reason}. Check that it does what the task asks.")
    lines += ["", "1. Call these tools in this order: " + " > ".join(p.tools_used) + "."]
    if p.parameters:
        params = ", ".join(
            f"{q.name} ({q.json_type}{', secret' if q.secret else ''})" for q in p.parameters
        )
        lines.append(f"2. Fill the placeholders for this task: {params}.")
    else:
        lines.append("2. It has no placeholders: the code runs as it is.")
    lines += [
        f"3. Run this {p.language} template with them filled in:",
        "",
        "```" + p.language,
        p.template,
        "```",
        "",
        "4. Then call `record_execution` with the task, the code that ran and each tool "
        "call's outcome (ok or its error).",
    ]
    return "\n".join(lines)


def register(server: MCPServer, upstream: Upstream) -> None:
    @server.resource(
        f"{URI_PREFIX}{{id}}",
        name="capability",
        title="A stored capability",
        description="One capability pml learned: its tools, intents, counters and best "
        "pattern (template, parameters, steps), as JSON.",
        mime_type="application/json",
    )
    async def capability(id: str, ctx: Context) -> str:
        if not id or "/" in id or len(id) > LIMITS.resource_id.bound:
            raise ResourceNotFoundError(f"no capability {shown(id)!r}: use {URI_PREFIX}{{id}}")

        def read(client: PmlClient) -> str:
            found = client.get_capability(f"capabilities/{id}")
            return _capability_json(found, client.get_pattern(found.best_pattern))

        try:
            text = await _with_client(upstream, _api_key(ctx, upstream), read)
        except PmlClientError as err:
            # An id pml refuses as a name (a control character in it) names no capability
            # either: the caller's mistake, as an unknown id is (docs/mcp.md, Resources and
            # prompt). A refused API key keeps its own error.
            if err.code is grpc.StatusCode.NOT_FOUND or "name" in dict(err.violations):
                raise ResourceNotFoundError(f"no capability {shown(id)!r}") from None
            raise ResourceError(upstream.describe(err)) from None
        return text

    @server.prompt(
        name="use_procedure",
        title="Use a known procedure",
        description="The best procedure pml knows for a task, as step-by-step instructions "
        "(tools in order, placeholders, the code template, then recording the run).",
    )
    async def use_procedure(
        ctx: Context,
        task: Annotated[
            str,
            Field(
                min_length=1,
                max_length=LIMITS.intent.bound,
                description="what the agent is asked to do",
            ),
        ],
    ) -> str:
        try:
            reply = await _with_client(
                upstream, _api_key(ctx, upstream), lambda c: c.suggest(task, 1)
            )
        except PmlClientError as err:
            raise _protocol_error(upstream, err, {"intent": "task"}) from None
        return _instructions(task, reply)
