"""The canonical code text of a run that OTel describes only by its tool calls: one
`await mcp.<tool>({...});` line per call, in order, the arguments as JSON with sorted keys. Two
runs with the same calls and argument keys normalize to one pattern (literals become
placeholders), so dedup, counters and the all-or-nothing rule apply as for real code."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

LANGUAGE = "typescript"
_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def call_line(tool: str, args: dict[str, Any]) -> str:
    text = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    # A name that is not an identifier (`gmail:get`) needs the bracket form.
    target = f"mcp.{tool}" if _IDENTIFIER.fullmatch(tool) else f"mcp[{json.dumps(tool)}]"
    return f"await {target}({text});"


def synthesize(calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
    return "\n".join(call_line(tool, args) for tool, args in calls) + "\n"
