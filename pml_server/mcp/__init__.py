"""`pml mcp`: an MCP server (official `mcp` SDK) in front of pml's gRPC API, over stdio or
Streamable HTTP, with the tools `suggest`, `record_execution` and `get_pattern`.

Public: `Upstream`, `UpstreamOptions` (`_upstream`), `build_server`, `run_stdio`, `run_http`
(`_serve`). Nothing is imported here, so `pml --help` does not pay for the SDK (2 s)."""
