"""Adapter over the Rust normalizer (`_core.normalize`): code -> template, hash, parameters.

The rest of the engine sees only `NormalizedCode`, so the Rust types stay behind this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from pml_server import _core


@dataclass(frozen=True)
class NormalizedParam:
    name: str
    json_type: str
    value_json: str
    secret: bool


@dataclass(frozen=True)
class NormalizedCode:
    language: str
    template: str
    code_hash: str
    params: tuple[NormalizedParam, ...]
    tool_calls: tuple[str, ...]
    parse_ok: bool
    fallback_reason: str
    schema_json: str
    # the code with secret literals and credential-shaped text replaced: the form stored
    redacted_code: str = ""


def normalize(code: str, language: str) -> NormalizedCode:
    """Normalize `code`; raises `CoreArgumentError` / `InputTooLargeError` (both
    InvalidArgumentErrors naming `code` or `language`) on bad input."""
    result = _core.normalize(code, language)
    return NormalizedCode(
        language=result.language,
        template=result.template,
        code_hash=result.code_hash,
        params=tuple(
            NormalizedParam(
                name=p.name, json_type=p.json_type, value_json=p.value_json, secret=p.secret
            )
            for p in result.params
        ),
        tool_calls=tuple(result.tool_calls),
        parse_ok=result.parse_ok,
        fallback_reason=result.fallback_reason,
        schema_json=result.schema_json,
        redacted_code=result.redacted_code,
    )


def redact_text(text: str) -> str:
    """`text` with credential-shaped tokens replaced by `[REDACTED]` (the Rust scanner)."""
    return _core.redact_text(text) if text else text
