"""Adapter over the Rust normalizer (`_core.normalize`): code -> template, hash, parameters.

The rest of the engine sees only `NormalizedCode`, so the Rust types stay behind this module.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    return _adapted(_core.normalize(code, language, with_steps=False))


def prepare_captures(
    items: Sequence[tuple[str, str, Sequence[str]]],
) -> list[tuple[NormalizedCode, list[str]] | Exception]:
    """For each `(code, language, texts)`: the code normalized as `normalize` does and each
    text redacted with what it flagged (`capture.redact`), in one core call for the whole
    batch (GIL released once). An input the core refuses gets its error (an
    `InvalidArgumentError` naming `code` or `language`; a text that is not UTF-8-encodable,
    which gRPC never delivers, its `UnicodeEncodeError`), the others are unaffected."""
    out: list[tuple[NormalizedCode, list[str]] | Exception] = []
    for result in _core.prepare_captures([(c, lang, list(t)) for c, lang, t in items]):
        if isinstance(result, Exception):
            out.append(result)
        else:
            normalized, texts = result
            out.append((_adapted(normalized), texts))
    return out


def _adapted(result: _core.Normalized) -> NormalizedCode:
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
