"""Why a suggestion may not be what the request asks for: the reasons shown beside it by
`pml suggest` and carried by the MCP `suggest` tool's structured output (docs/ranking.md,
Weak matches). Pure and cheap: the CLI imports it, so no numpy and no ranking modules.

Two notes, each with its reason in words:

- **contradicts**: the request's verb is of one kind (read, write, delete, send) and the
  pattern's tools do that kind nowhere but another kind (a read request answered by
  `write_file` alone). The embedders score "Load a JSON file" against "Write JSON file" about
  0.78: no `min_match` separates it from a paraphrase without losing paraphrases.
- **weak**: the match is below `WEAK_MATCH`, the level under which a shown suggestion was
  more often wrong than right on the development set (docs/ranking.md, Weak matches). Not for
  a request without words (what usually comes next, docs/ranking.md, Sessions): its match is 0
  by construction, and the suggestion was chosen by the agent's previous step."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# A match under this is called weak beside the suggestion (docs/ranking.md, Weak matches).
WEAK_MATCH = 0.5

# Verbs by the kind of action they ask for. Only kinds that exclude each other: a request of
# one kind answered by tools of another kind alone cannot be what was asked.
_KINDS: dict[str, frozenset[str]] = {
    "reads": frozenset(
        [
            "read",
            "load",
            "get",
            "fetch",
            "open",
            "parse",
            "view",
            "show",
            "list",
            "download",
            "find",
            "search",
            "query",
            "lookup",
            "retrieve",
            "inspect",
        ]
    ),
    "writes": frozenset(
        ["write", "save", "store", "put", "create", "upload", "update", "append", "insert", "edit"]
    ),
    "deletes": frozenset(["delete", "remove", "erase", "drop", "purge", "destroy", "unlink"]),
    "sends": frozenset(["send", "post", "email", "mail", "notify", "publish", "forward", "reply"]),
}
_KIND_OF = {verb: kind for kind, verbs in _KINDS.items() for verb in verbs}
_WORD = re.compile(r"[a-z]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


CautionKind = Literal["contradicts", "weak"]
_BASE = {"reads": "read", "writes": "write", "deletes": "delete", "sends": "send"}


@dataclass(frozen=True)
class Caution:
    kind: CautionKind
    reason: str  # one sentence, for people


def _request_kind(intent: str) -> tuple[str, str] | None:
    """(kind, verb) of the request's first verb of a known kind, within its first words."""
    for word in _WORD.findall(intent.lower())[:6]:
        if word in _KIND_OF:
            return _KIND_OF[word], word
    return None


def _tool_kinds(tool: str) -> set[str]:
    words = _WORD.findall(_CAMEL.sub("_", tool).lower())
    return {_KIND_OF[w] for w in words if w in _KIND_OF}


def cautions(intent: str, tools: Sequence[str], match: float) -> list[Caution]:
    """The notes for one suggestion of `intent` whose pattern calls `tools` (in order)."""
    found = []
    asked = _request_kind(intent)
    if asked is not None:
        kind, verb = asked
        by_tool = {t: _tool_kinds(t) for t in tools}
        done = set().union(*by_tool.values()) if by_tool else set()
        if done and kind not in done:
            which = ", ".join(t for t, kinds in by_tool.items() if kinds)
            does = " and ".join(_BASE[k] for k in sorted(done))
            found.append(
                Caution(
                    "contradicts",
                    f"the request {kind} ({verb!r}); its tools only {does} ({which})",
                )
            )
    if match < WEAK_MATCH and intent.strip():
        found.append(
            Caution(
                "weak",
                f"weak match {match:.2f} (under {WEAK_MATCH}): the stored intents say "
                "something else",
            )
        )
    return found
