"""The one table of input limits: every bound on a request field, with the field it bounds and the
unit it is measured in. The API edge (`api/validate.py`, `api/stream.py`, the MCP tools) and the
engine (`capture/rules.py`, `service/`) check against the same entries, so a value the API lets
through is never refused by the engine for a different bound, and the two messages agree.

Three entries are settable: `code` and `tool_calls` (`pml serve --max-code-bytes`,
`--max-tool-calls`, or `[engine]` of `--config`: `EngineConfig.limits` is this table with those
bounds replaced) and `open_executions` (`--max-open-executions`, `[server]`: a stream's memory,
replaced by the server). The rest are part of the contract (proto/pml/v1 documents them).
Bounds the Rust core owns (the normalizer's input size and parameter cap) are read from the
core, never restated.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sized
from dataclasses import dataclass, fields, replace
from typing import Literal

from pml_server import _core

Unit = Literal["bytes", "characters", "items"]

KIB = 1024
MIB = 1024 * KIB
_ANSWER_BYTES = 4 * MIB  # what a default gRPC client receives (`Limits.answer`)


@dataclass(frozen=True)
class Limit:
    """`field` (in request terms) holds at most `bound` `unit`s."""

    field: str
    bound: int
    unit: Unit

    def size(self, value: str | bytes | Sized) -> int:
        """`value` measured in this limit's unit (bytes of a str: its UTF-8 encoding)."""
        if self.unit == "bytes" and isinstance(value, str):
            return len(value.encode("utf-8", "surrogatepass"))
        return len(value)

    def excess(self, value: str | bytes | Sized) -> str | None:
        """The violation's description when `value` is over the bound, else None."""
        size = self.size(value)
        if size <= self.bound:
            return None
        return f"is {size} {self.unit}; the limit is {self.bound} {self.unit}"


@dataclass(frozen=True)
class Limits:
    """Every per-field limit. `LIMITS` holds the defaults; `with_bounds` the configured ones."""

    # ---- one execution (ExecutionRecord, a stream's ExecutionStarted/ToolCall*) ----
    # The proto's contract (resources.proto): at most 128 characters.
    request_id: Limit = Limit("request_id", 128, "characters")
    intent: Limit = Limit("intent", 4096, "characters")
    # Settable, up to `code_ceiling`.
    code: Limit = Limit("code", 256 * KIB, "bytes")
    language: Limit = Limit("language", 32, "characters")
    tool_calls: Limit = Limit("tool_calls", 256, "items")  # settable
    tool: Limit = Limit("tool", 256, "characters")  # one tool call's tool name
    arguments_json: Limit = Limit("arguments_json", 64 * KIB, "bytes")
    error: Limit = Limit("error", 16 * KIB, "characters")
    trace: Limit = Limit("trace", 1 * MIB, "bytes")
    tags: Limit = Limit("tags", 32, "items")  # also the tags a pattern keeps
    tag: Limit = Limit("tags[]", 64, "characters")
    # Not a secret, but stored as a key (docs/ranking.md, Sessions).
    session_id: Limit = Limit("session_id", 128, "characters")
    # A pattern's parameters: the normalizer keeps the first ones, the rest stay code.
    parameters: Limit = Limit("parameters", _core.NORMALIZE_MAX_PARAMS, "items")
    # ---- calls ----
    # Tenant names come from the keys file (`TENANT_NAME`) and key every stored record.
    tenant: Limit = Limit("tenant", 64, "characters")
    resource_id: Limit = Limit("name", 256, "characters")  # the {id} of `patterns/{id}`
    page_size: Limit = Limit("page_size", 1000, "items")
    page_token: Limit = Limit("page_token", 2048, "characters")
    suggestions: Limit = Limit("page_size", 100, "items")  # Suggest's k
    available_tools: Limit = Limit("available_tools.tools", 1024, "items")
    # Suggest's context (docs/ranking.md, Sessions): only the last previous pattern is read.
    previous_patterns: Limit = Limit("context.previous_patterns", 64, "items")
    previous_tools: Limit = Limit("context.previous_tools", 256, "items")
    # ---- sessions (docs/ranking.md, Sessions) ----
    # A tenant's open sessions (their last step each); settable: `max_sessions`. A sweep drops
    # idle ones, then the least recently used beyond the bound.
    sessions: Limit = Limit("sessions", 10_000, "items")
    # Transitions out of one capability read by a Suggest with a context (the most recent kept
    # count first in key order is not known, so the bound is on what one request reads).
    transitions_read: Limit = Limit("transitions", 1024, "items")
    # Stored workflows read for what follows the previous step's last tool (docs/ranking.md,
    # Sessions, "Workflows"): those with the most successes; about a microsecond each.
    workflows_read: Limit = Limit("workflows", 256, "items")
    capture_batch: Limit = Limit("records", 64, "items")  # one `record_many` call
    # ---- one StreamTraces call ----
    open_executions: Limit = Limit("started", 1024, "items")  # started, not finished; settable
    # Bytes of live executions (started + tool calls) one stream buffers before they finish.
    stream_buffered: Limit = Limit("tool_call_finished", 32 * MIB, "bytes")
    # A message's execution id, as long as the request id it may stand for: a stream keeps the
    # ids it has seen (to tell a resend from a reused id) and of its open executions, and
    # unbounded, 200 ids of 4 MB each held 850 MB on one stream.
    execution_id: Limit = Limit("execution_id", 128, "characters")
    # Messages in one StreamTracesRequest.batch (the proto's contract: at most 256).
    stream_batch: Limit = Limit("batch", 256, "items")
    # ---- one OTLP Export (api/otlp.py) ----
    # Spans of one ExportTraceServiceRequest: the mapping holds every span's attributes at once
    # (about 9 KB of memory a span), so an Export of 40k spans took 360 MB. The OTel SDK's batch
    # processor sends at most 512 a request by default.
    otlp_spans: Limit = Limit("resource_spans", 8192, "items")
    # Its resource_spans and scope_spans entries, counted together: room for every span of the
    # largest Export in a resource and a scope of its own. Unbounded, 2M empty entries (an
    # 8 MiB message, `{},` each in OTLP/JSON) took 16 s to read before any span was counted.
    otlp_groups: Limit = Limit("resource_spans", 2 * 8192, "items")
    # Members of one gzip OTLP/HTTP body (RFC 1952: members in a row are one stream; an
    # exporter sends one, `cat a.gz b.gz` a few): each starts a new inflater on a copy of the
    # rest of the body, so unbounded, a 4 MB body of 200k empty members took 29 s.
    gzip_members: Limit = Limit("body", 64, "items")
    # ---- answers (api/admission/budget.py): no answer fails because of another record's size ----
    answer_pattern: Limit = Limit("patterns[]", 64 * KIB, "bytes")  # then trimmed
    answer: Limit = Limit("patterns", _ANSWER_BYTES, "bytes")  # gRPC's default receive limit
    # The most `code` may be set to: GetPattern answers a pattern's code and its template (about
    # the code's size) whole, and both must fit `answer` with 1 MiB left for the rest of the
    # pattern (docs/api.md, "Answer sizes"). At 4 MiB of code a GetPattern answer was
    # 8.4 MB, which no default gRPC client reads.
    code_ceiling: Limit = Limit("max_code_bytes", (_ANSWER_BYTES - MIB) // 2, "bytes")
    # The most `tool_calls` may be set to: a capability answers its tools (one a call, each up
    # to `tool` long: 1 KiB of UTF-8) whole, with its 50 intents, within `answer`. Unbounded,
    # 5,000 calls named with 1 KiB each made a 5.1 MB GetCapability answer (and ListCapabilities
    # page), which no default gRPC client reads.
    tool_calls_ceiling: Limit = Limit("max_tool_calls", 2048, "items")
    # The JSON text of one answer of the MCP tool `suggest` (docs/mcp.md, Protocol): what an
    # agent reads into its context. k = 100 over 30 KB templates was 2.2 MB; this is about
    # 16,000 tokens, under the 25,000 an MCP client such as Claude Code shows by default.
    mcp_suggest: Limit = Limit("capabilities", 64 * KIB, "bytes")
    # Entries of one RunRetention answer (one per action; each also counts in `answer`): the
    # actions are all applied, the answer lists the first ones and how many there were.
    retention_entries: Limit = Limit("entries", 10_000, "items")

    def with_bounds(self, **bounds: int) -> Limits:
        """This table with the bounds of the named settable entries replaced (each >= 1; code
        and tool calls at most their ceilings, `_CEILINGS`)."""
        unknown = set(bounds) - set(SETTABLE)
        if unknown:
            raise ValueError(f"limits {sorted(unknown)} are not settable")
        for name, bound in bounds.items():
            if bound < 1:
                raise ValueError(f"the {name} limit ({SETTABLE[name]}) must be >= 1, got {bound}")
        for name, (ceiling, whole) in _CEILINGS.items():
            if bounds.get(name, 0) > (most := getattr(self, ceiling).bound):
                raise ValueError(
                    f"engine.{SETTABLE[name]} must be at most {most}, got {bounds[name]}: "
                    f"{whole} the {self.answer.bound} bytes a default gRPC client receives"
                )
        return replace(
            self, **{name: replace(getattr(self, name), bound=b) for name, b in bounds.items()}
        )

    def entries(self) -> tuple[tuple[str, Limit], ...]:
        """(name, limit) for every entry, in table order (docs, tests)."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self))


LIMITS = Limits()
# The settable entries with a ceiling: the entry that holds it, and what it keeps whole.
_CEILINGS = {
    "code": (
        "code_ceiling",
        "GetPattern answers a pattern's code and its template whole, and both must fit",
    ),
    "tool_calls": (
        "tool_calls_ceiling",
        "GetCapability answers a capability's tools (one a call) whole with its intents, and "
        "all must fit",
    ),
}
# Code the settings let through is code the Rust normalizer takes.
assert LIMITS.code_ceiling.bound <= _core.NORMALIZE_MAX_INPUT_BYTES
# The settable entries and the setting that sets each (pml_server/config).
SETTABLE = {
    "code": "max_code_bytes",
    "tool_calls": "max_tool_calls",
    "open_executions": "max_open_executions",
    "sessions": "max_sessions",
}

# A tenant name: a letter or digit, then letters, digits, '_', '.', '-'; `LIMITS.tenant` long.
TENANT_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{LIMITS.tenant.bound - 1}}}")
TENANT_NAME_RULE = (
    f"1-{LIMITS.tenant.bound} letters, digits, '_', '.', '-' (starting with a letter or digit)"
)


# A language as a record names it: a short token of letters and digits, then `_ . + # -`
# (`python`, `ts`, `c++`, `c#`, `objective-c`); `LIMITS.language` long (docs/api.md, Requests).
LANGUAGE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.+#-]{{0,{LIMITS.language.bound - 1}}}")


def request_id_problem(request_id: str) -> str | None:
    """Why a (non-empty) request id is refused, or None: at most `LIMITS.request_id` long,
    printable ASCII without spaces (it is a stored key and compared as given), and no
    credential (`_core.redact_name` would change it): a request id cannot be redacted without
    breaking the idempotency it gives, so one holding a credential is refused, never stored
    (docs/api.md, Requests)."""
    if (excess := LIMITS.request_id.excess(request_id)) is not None:
        return excess
    if not all("!" <= ch <= "~" for ch in request_id):
        return "must be printable ASCII without spaces or control characters"
    if _core.redact_name(request_id) != request_id:
        return "must not hold a credential (a token, a password or a URL's user-info)"
    return None


def language_problem(language: str) -> str | None:
    """Why a (non-empty) language is refused, or None: `LANGUAGE_NAME` (`python`, `c++`) and no
    credential's shape (docs/api.md, Requests)."""
    if (excess := LIMITS.language.excess(language)) is not None:
        return excess
    if LANGUAGE_NAME.fullmatch(language) is None:
        return (
            "must be a language's name: a letter or digit, then letters, digits, "
            "'_', '.', '+', '#', '-'"
        )
    if _core.redact_name(language) != language:
        return "must not hold a credential"
    return None


# Characters a tool name must not hold: control characters and the invisible ones (format
# characters such as a right-to-left override or a zero-width space, line and paragraph
# separators), which make two names that differ look alike when shown (docs/api.md, Requests).
_UNSEEN_CATEGORIES = frozenset(["Cc", "Cf", "Zl", "Zp"])


def unseen_character_problem(name: str) -> str | None:
    """Why a name a client chose is refused for its characters, or None: no control or
    invisible character (`_UNSEEN_CATEGORIES`), named by its code point. The one rule for tool
    names and session ids (docs/api.md, Requests)."""
    for ch in name:
        if unicodedata.category(ch) in _UNSEEN_CATEGORIES:
            return (
                f"must not contain control or invisible characters (U+{ord(ch):04X} "
                f"{unicodedata.name(ch, 'unnamed')})"
            )
    return None


def tool_name_problem(tool: str) -> str | None:
    """Why a (non-empty) tool name is refused, or None: `unseen_character_problem`."""
    return unseen_character_problem(tool)


def intent_problem(intent: str) -> str | None:
    """Why a (non-blank) intent is refused, or None: it holds no letter or digit, so nothing to
    embed or match (the hashing embedder would give a zero vector)."""
    if not any(ch.isalnum() for ch in intent):
        return "must contain at least one letter or digit"
    return None


def resource_id_problem(resource_id: str) -> str | None:
    """Why the {id} of a resource name (`patterns/{id}`, `capabilities/{id}`) is none, or None:
    at most `LIMITS.resource_id` long, not blank, no `/`, printable. The one check, at the API
    edge (a name, a Suggest context's `previous_patterns`) and in the engine."""
    if (excess := LIMITS.resource_id.excess(resource_id)) is not None:
        return excess
    if not resource_id.strip() or "/" in resource_id or not resource_id.isprintable():
        return "is no id: blank, or holding `/` or a character that does not print"
    return None


def session_id_problem(session_id: str) -> str | None:
    """Why a (non-empty) session id is refused, or None: at most `LIMITS.session_id` long, not
    blank, no control or invisible character (`unseen_character_problem`: two ids that look
    alike are two sessions; docs/ranking.md, Sessions). The one check of a session id, at the
    API edge, in the engine and for an OTLP `gen_ai.conversation.id`."""
    if (excess := LIMITS.session_id.excess(session_id)) is not None:
        return excess
    if not session_id.strip():
        return "must not be blank"
    return unseen_character_problem(session_id)
