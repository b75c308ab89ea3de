"""Replay every golden vector of tests/vectors/normalization.json through the extension."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pml_server import _core

VECTORS_PATH = Path(__file__).resolve().parents[1] / "vectors" / "normalization.json"
FILE: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = FILE["vectors"]
BY_NAME = {v["name"]: v for v in VECTORS}


def test_file_matches_normalizer_version() -> None:
    assert FILE["normalizer_version"] == _core.NORMALIZER_VERSION
    assert len(VECTORS) >= 30


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    got = _core.normalize(vector["code"], vector["language"])
    expected = vector["expected"]
    assert got.language == expected["language"]
    assert got.template == expected["template"]
    assert got.code_hash == expected["code_hash"]
    assert got.parse_ok == expected["parse_ok"]
    assert got.fallback_reason == expected["fallback_reason"]
    assert got.tool_calls == expected["tool_calls"]
    params = [
        {
            "name": p.name,
            "json_type": p.json_type,
            "value_json": p.value_json,
            "start": p.start,
            "end": p.end,
            "secret": p.secret,
        }
        for p in got.params
    ]
    assert params == expected["params"]
    assert json.loads(got.schema_json) == expected["schema"]
    # Spans are Python str indices of the literal the placeholder replaced.
    for p in got.params:
        literal = vector["code"][p.start : p.end]
        assert literal
        if p.json_type == "string":
            assert literal[-1] in "'\"`"


@pytest.mark.parametrize(
    "vector", [v for v in VECTORS if "same_hash_as" in v], ids=lambda v: v["name"]
)
def test_same_hash_relation(vector: dict[str, Any]) -> None:
    other = BY_NAME[vector["same_hash_as"]]
    assert (
        _core.normalize(vector["code"], vector["language"]).code_hash
        == _core.normalize(other["code"], other["language"]).code_hash
    )


@pytest.mark.parametrize(
    "vector", [v for v in VECTORS if "differs_from" in v], ids=lambda v: v["name"]
)
def test_different_hash_relation(vector: dict[str, Any]) -> None:
    mine = _core.normalize(vector["code"], vector["language"]).code_hash
    for name in vector["differs_from"]:
        other = BY_NAME[name]
        assert mine != _core.normalize(other["code"], other["language"]).code_hash, name
