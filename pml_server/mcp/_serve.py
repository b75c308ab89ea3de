"""Building the MCP server and running it over stdio or Streamable HTTP."""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    ListResourcesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)
from pydantic import ValidationError

from pml_server import __version__
from pml_server.api.http_deadline import listener_config, listening_socket
from pml_server.config import bind_error, is_loopback_host
from pml_server.domain.limits import LIMITS
from pml_server.mcp import _resources as resources
from pml_server.mcp._http_auth import BearerCheck
from pml_server.mcp._message_limit import shown
from pml_server.mcp._stdio import serve_stdio
from pml_server.mcp._tools import register
from pml_server.mcp._upstream import Upstream

_INSTRUCTIONS = (
    "pml is a procedural memory: before writing code for a task, call `suggest` with the task "
    "to reuse a procedure that worked before; after running code, call `record_execution` "
    "with what ran and how each tool call ended."
)


def argument_error(err: ValidationError) -> str:
    """One sentence per bad field, naming it (`tool_calls.0.tool`), without pydantic's type
    tags, echoed input or documentation links."""
    parts = []
    for e in err.errors(include_url=False, include_input=False):
        where = ".".join(str(x) for x in e["loc"]) or "arguments"
        text = str(e["msg"])
        parts.append(f"{where}: {text[:1].lower()}{text[1:]}")
    return "invalid argument: " + "; ".join(parts)


# The SDK's one answer to request params its protocol models refuse, and to a request sent
# before `initialize` (it names neither the field nor the missing handshake).
_SDK_INVALID_PARAMS = "Invalid request parameters"
_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


async def name_bad_params(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
    """Request params the protocol refuses (`tools/call` with a `name` that is no string,
    `arguments` that is no object, a prompt argument that is no string, a progress token that
    is an object) answer -32602 naming the member, as a bad tool argument does (docs/mcp.md,
    Protocol); so does a request before `initialize`. The SDK answered each
    "Invalid request parameters", nothing more."""
    try:
        return await call_next(ctx)
    except ValidationError as err:
        found = err.errors(include_url=False, include_input=False)
        if not found or found[0]["loc"][:1] != ("params",):
            raise
        said: dict[str, list[str]] = {}
        for e in found:
            loc = [str(x) for x in e["loc"][1:]]
            if loc and loc[-1] in _UNION_TAGS:  # one member of a union: `progressToken.str`
                loc.pop()
            text = str(e["msg"])
            said.setdefault(".".join(loc) or "params", []).append(text[:1].lower() + text[1:])
        parts = [f"{where}: {' or '.join(texts)}" for where, texts in list(said.items())[:3]]
        raise MCPError(INVALID_PARAMS, "invalid params: " + "; ".join(parts)) from None
    except MCPError as err:
        if err.error.code == INVALID_PARAMS and err.error.message == _SDK_INVALID_PARAMS:
            message = f"invalid request: {ctx.method} before initialize: initialize first"
            raise MCPError(INVALID_PARAMS, message) from None
        raise


def refuse_unserved(server: MCPServer) -> ServerMiddleware[Any]:
    """A method pml does not serve (`completion/complete`, `logging/setLevel`,
    `resources/subscribe`: capabilities it does not advertise) is -32601 Method not found
    whatever its params (docs/mcp.md, Protocol). The SDK validated a spec method's params
    first, so one sent with params missing or malformed answered -32602 as if it were
    served."""

    async def middleware(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        if ctx.request_id is None or ctx.method == "initialize":  # a notification; the handshake
            return await call_next(ctx)
        if server._lowlevel_server.get_request_handler(ctx.method) is None:
            # The method echoed as every name a caller sent is: clipped (`shown`).
            raise MCPError(METHOD_NOT_FOUND, "Method not found", data=shown(ctx.method))
        return await call_next(ctx)

    return middleware


class PmlMCPServer(MCPServer):
    upstream: Upstream | None = None

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        """A resource per stored capability, a page at a time (docs/mcp.md, Resources and
        prompt); the SDK's own list holds only fixed resources, and pml has none."""
        assert self.upstream is not None
        context = Context(request_context=ctx, mcp_server=self)
        return await resources.list_capabilities(self.upstream, context, params)

    async def _handle_read_resource(
        self, ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult | InputRequiredResult:
        """An unknown resource's error echoes the start of its URI (`shown`), in its message
        and its `data`, not the whole of it."""
        try:
            return await super()._handle_read_resource(ctx, params)
        except MCPError as err:
            if not isinstance(err.error.data, dict) or "uri" not in err.error.data:
                raise
            message = err.error.message.replace(str(params.uri), shown(str(params.uri)))
            data = {**err.error.data, "uri": shown(str(params.uri))}
            raise MCPError(err.error.code, message, data=data) from None

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[Any, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        """An unknown prompt, or a bad prompt argument, is -32602 Invalid params with one
        sentence naming it, as a tool's is (the SDK answers error code 0)."""
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, f"unknown prompt: {shown(name)}")
        # A missing argument, as pydantic says it of a tool's (the SDK answered error code 0
        # and logged a traceback).
        given = arguments or {}
        missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in given]
        if missing:
            fields = "; ".join(f"{m}: field required" for m in missing)
            raise MCPError(INVALID_PARAMS, f"invalid argument: {fields}")
        try:
            return await super().get_prompt(name, arguments, context)
        except ValueError as err:
            cause: BaseException | None = err
            while cause is not None and not isinstance(cause, ValidationError):
                cause = cause.__cause__
            if cause is None:
                raise
            raise MCPError(INVALID_PARAMS, argument_error(cause)) from None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """A tool error is one line for the model: a bad argument names it (`argument_error`),
        and pml's own refusal (`invalid argument: available_tools.0: ...`, `pml is
        unavailable ...`) comes without the SDK's `Error executing tool NAME: ` in front, as an
        argument error does (docs/mcp.md, Protocol). A crash keeps the SDK's generic text."""
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            raise ToolError(f"Unknown tool: {shown(name)}")
        known = tool.parameters.get("properties", {})
        extra = [key for key in arguments or {} if key not in known]
        if extra:
            # A misspelt argument (`limit` for `k`, `min_sucess`) was dropped without a word:
            # the call ran as if it had not been given. (Bounded: the first few names.)
            said = [f"{key[:64]}: extra inputs are not permitted" for key in extra[:5]]
            more = f"; and {len(extra) - 5} more" if len(extra) > 5 else ""
            raise ToolError(f"invalid argument: {'; '.join(said)}{more}")
        calls = (arguments or {}).get("tool_calls") if name == "record_execution" else None
        if isinstance(calls, list) and self.upstream is not None:
            # Counted before each is read (docs/mcp.md, Protocol): pydantic read every one of
            # 100,000 calls, about 3 s, before pml refused them for their number.
            limit = LIMITS.with_bounds(tool_calls=self.upstream.options.max_tool_calls)
            if (excess := limit.tool_calls.excess(calls)) is not None:
                raise ToolError(f"invalid argument: tool_calls: {excess}")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as err:
            if isinstance(err.__cause__, ValidationError):
                raise ToolError(argument_error(err.__cause__)) from err.__cause__
            prefix = f"Error executing tool {name}: "
            if isinstance(err.__cause__, ToolError) and str(err).startswith(prefix):
                raise ToolError(str(err)[len(prefix) :]) from err.__cause__
            raise


def build_server(upstream: Upstream) -> MCPServer:
    server = PmlMCPServer(
        "pml", instructions=_INSTRUCTIONS, version=__version__, log_level="WARNING"
    )
    server.upstream = upstream
    server.middleware.extend([refuse_unserved(server), name_bad_params])
    register(server, upstream)
    resources.register(server, upstream)
    for tool in server._tool_manager.list_tools():
        # What call_tool enforces (an argument the tool does not take is refused), published.
        tool.parameters["additionalProperties"] = False
    return server


def run_stdio(upstream: Upstream) -> None:
    try:
        anyio.run(serve_stdio, build_server(upstream))
    except* (BrokenPipeError, ConnectionResetError):
        # The client closed its end of our stdout (it went away, e.g. killed, mid-call): nobody
        # is left to answer, and what pml applied stays applied (docs/reliability.md, Clients
        # that give up). An exit like any end of session, not a traceback and status 1.
        _drop_stdout()
    finally:
        upstream.close()


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush of the answer the closed pipe
    refused would fail again at exit ("Exception ignored", status 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def security_settings(
    host: str, port: int, allowed_hosts: list[str], allowed_origins: list[str]
) -> TransportSecuritySettings:
    """DNS rebinding protection, always on: a browser page on another origin that resolves its
    name to our address sends its own Host and Origin, which are refused (421 and 403)."""
    bracketed = f"[{host}]" if ":" in host else host
    if is_loopback_host(host):
        names = dict.fromkeys(["127.0.0.1", "localhost", "[::1]", bracketed])
        hosts = [f"{name}:*" for name in names]
        origins = [f"http://{name}:*" for name in names]
    else:
        hosts = [f"{bracketed}:{port}", bracketed]
        origins = [f"http://{bracketed}:{port}", f"https://{bracketed}:{port}"]
    # docs/mcp.md, "HTTP front": a Host header leaves out its scheme's default port, so
    # `pml.example:443` is also sent as `pml.example` (clients of https://pml.example/mcp).
    for allowed in allowed_hosts:
        name, _, given_port = allowed.rpartition(":")
        hosts += [allowed, name] if name and given_port in ("80", "443") else [allowed]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=origins + allowed_origins,
    )


def run_http(
    upstream: Upstream,
    host: str,
    port: int,
    *,
    path: str = "/mcp",
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
) -> None:
    """Serve Streamable HTTP on host:port (0: any free port; the bound address is printed).
    Stateless: each request stands alone, so its bearer key decides its tenant."""
    # Listening before the address is printed: a client that connects while uvicorn is still
    # starting waits in the backlog instead of being refused.
    try:
        sock = listening_socket(host, port)
    except OSError as err:
        shown = f"[{host}]" if ":" in host else host
        raise bind_error(f"{shown}:{port}", err) from None
    bound = sock.getsockname()[1]
    security = security_settings(host, bound, allowed_hosts or [], allowed_origins or [])
    app = build_server(upstream).streamable_http_app(
        streamable_http_path=path,
        stateless_http=True,
        json_response=True,
        host=host,
        transport_security=security,
    )
    shown = f"[{host}]" if ":" in host else host
    print(f"pml mcp listening on http://{shown}:{bound}{path}", file=sys.stderr, flush=True)
    # Stalled clients hold no descriptor for long, and at most `MAX_OPEN_CONNECTIONS` at once.
    config = listener_config(BearerCheck(app, upstream, security, path), lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        upstream.close()
