"""The largest message `pml mcp` reads, over either transport (docs/mcp.md, Protocol): the MCP
SDK's own bound on an HTTP request body, 4 MiB. Over stdio no more of a line is held; over HTTP
no more of a body is read. Past it, -32600 Invalid Request in one sentence."""

from __future__ import annotations

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

MAX_MESSAGE_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
TOO_LARGE = (
    f"Invalid Request: the message is over {MAX_MESSAGE_BYTES} bytes, the most pml mcp reads"
)

# What an error echoes of a name the caller sent (a tool, prompt or resource, an argument):
# its start, then its length. The whole of a 1 MB tool name came back, into the agent's context.
ECHOED_CHARACTERS = 64


def shown(text: str) -> str:
    """`text` as an error echoes it: whole when short, else its start and its length."""
    if len(text) <= ECHOED_CHARACTERS:
        return text
    return f"{text[:ECHOED_CHARACTERS]}... ({len(text)} characters)"
