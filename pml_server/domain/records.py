"""Stored record types (a pattern, its counters, intent mappings, capabilities) and their JSON form.

A pattern's rarely changing part (`PatternRecord`: template, code, tools) and its hot part
(`PatternCounters`: rewritten by every capture) are separate records, so counting a run never
rewrites a template of up to 256 KiB.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pml_server.domain import json_form, yielding
from pml_server.domain.lru import BytesMemo
from pml_server.domain.vectors import Vector


@dataclass(frozen=True)
class ParamSpec:
    name: str
    json_type: str
    secret: bool


@dataclass(frozen=True)
class PatternRecord:
    id: str
    code_hash: str
    template: str
    original_code: str
    language: str
    tools_used: tuple[str, ...]
    params: tuple[ParamSpec, ...]
    parameter_schema_json: str
    capability_id: str
    first_seen_ms: int
    code_tools: tuple[str, ...] = ()  # tool calls read statically from the code
    parse_ok: bool = True
    flagged_for_removal: bool = False
    superseded_by: str = ""
    # The steps read from `original_code` when the pattern was made and the rules they were
    # read under, as JSON (capture/steps.py; "": none stored, read on a view).
    steps_json: str = ""

    def to_json(self) -> bytes:
        return json_form.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> PatternRecord:
        data = json_form.loads(raw)
        data["tools_used"] = tuple(data["tools_used"])
        data["code_tools"] = tuple(data.get("code_tools", ()))
        params = []
        for p in data["params"]:
            yielding.checkpoint()  # up to 256 parameters a pattern: a long call's loop
            params.append(ParamSpec(**p))
        data["params"] = tuple(params)
        return cls(**data)


@dataclass(frozen=True)
class FailureSignature:
    """How one kind of failure of a known pattern looked: which tool, which error (with
    numbers and quoted values blanked) and the last argument values it failed with (redacted)."""

    signature: str
    tool: str
    error: str
    count: int
    last_ms: int
    values_json: dict[str, str] = field(default_factory=dict)


@dataclass
class PatternCounters:
    usage: int = 0
    success: int = 0
    failure: int = 0
    last_used_ms: int = 0
    duration_sum_ms: float = 0.0
    duration_runs: int = 0
    mismatch_count: int = 0
    # placeholder name -> recent values (JSON text), newest first, secrets "[REDACTED]"
    recent_values: dict[str, list[str]] = field(default_factory=dict)
    failure_signatures: list[FailureSignature] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)  # execution tags seen, sorted, bounded
    # How many intents the pattern has and the [id, hit count] of those a view shows, best
    # first (domain/shown_intents.py); None in a row an older build wrote.
    intent_count: int | None = None
    top_intents: list[list[int]] | None = None

    @property
    def mean_duration_ms(self) -> float:
        return self.duration_sum_ms / self.duration_runs if self.duration_runs else 0.0

    def to_json(self) -> bytes:
        # Written by every capture: a hand-built dict is several times faster than asdict().
        data = {
            "usage": self.usage,
            "success": self.success,
            "failure": self.failure,
            "last_used_ms": self.last_used_ms,
            "duration_sum_ms": self.duration_sum_ms,
            "duration_runs": self.duration_runs,
            "mismatch_count": self.mismatch_count,
            "recent_values": self.recent_values,
            "failure_signatures": [vars(s) for s in self.failure_signatures],
            "tags": self.tags,
            "intent_count": self.intent_count,
            "top_intents": self.top_intents,
        }
        return json_form.dumps(data)

    @classmethod
    def from_json(cls, raw: bytes) -> PatternCounters:
        data: dict[str, Any] = json_form.loads(raw)
        data["failure_signatures"] = [FailureSignature(**f) for f in data["failure_signatures"]]
        return cls(**data)


@dataclass(frozen=True)
class IntentRecord:
    id: int  # u64, also the vector index id
    pattern_id: str
    text: str
    hit_count: int
    last_seen_ms: int
    model_id: str
    vector: Vector

    @property
    def str_id(self) -> str:
        """The id as the API shows it (and as the lexical index keys it)."""
        return f"int_{self.id:016x}"

    def to_json(self) -> bytes:
        data = {
            "id": self.id,
            "pattern_id": self.pattern_id,
            "text": self.text,
            "hit_count": self.hit_count,
            "last_seen_ms": self.last_seen_ms,
            "model_id": self.model_id,
            "vector": base64.b64encode(self.vector.astype("<f4").tobytes()).decode(),
        }
        return json_form.dumps(data)

    @classmethod
    def from_json(cls, raw: bytes) -> IntentRecord:
        data = json_form.loads(raw)
        vector = np.frombuffer(base64.b64decode(data.pop("vector")), dtype="<f4").astype(np.float32)
        vector.flags.writeable = False  # decoded records may be shared (see decode_intent)
        return cls(vector=vector, **data)


# Suggest reads every intent of each candidate pattern; decoding the JSON and base64 vector was
# most of its time. Keyed by the exact stored bytes, a cached record can never be stale (changed
# bytes are another key), and sharing it is safe: the record is frozen, its vector read-only.
# Bounded by the bytes it holds (docs/operations.md, "Limits, keepalive and shutdown").
INTENT_DECODE_CACHE_BYTES = 64 * 1024 * 1024

# `IntentRecord.from_json(raw)`, memoized on the stored bytes.
decode_intent = BytesMemo(IntentRecord.from_json, INTENT_DECODE_CACHE_BYTES)


@dataclass(frozen=True)
class CapabilityRecord:
    """A group of patterns with the same tool signature and similar intents. Membership is a
    link (listed in `pattern_ids`), so grouping can be undone without losing any pattern."""

    id: str
    tools: tuple[str, ...]
    pattern_ids: tuple[str, ...]
    created_ms: int

    def to_json(self) -> bytes:
        return json_form.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> CapabilityRecord:
        data = json_form.loads(raw)
        data["tools"] = tuple(data["tools"])
        data["pattern_ids"] = tuple(data["pattern_ids"])
        return cls(**data)


@dataclass(frozen=True)
class TenantStats:
    executions: int = 0
    rejected: int = 0
    failures_logged: int = 0
    patterns: int = 0
    capabilities: int = 0
    intents: int = 0

    def to_json(self) -> bytes:
        return json_form.dumps(vars(self))

    @classmethod
    def from_json(cls, raw: bytes) -> TenantStats:
        return cls(**json_form.loads(raw))
