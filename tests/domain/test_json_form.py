"""The stored records' JSON codec (orjson with a standard-library fallback) against `json`."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pml_server.domain import json_form

# What stored records hold: text (any code point, lone surrogates included), 64-bit ints,
# finite floats, booleans, null, lists and string-keyed objects.
_scalars = (
    st.text()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.none()
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(_values)
def test_round_trip_and_both_ways_compatible_with_json(value: Any) -> None:
    encoded = json_form.dumps(value)
    assert json_form.loads(encoded) == value
    # a store written by an older version (json) reads back the same, and the other way round
    assert json.loads(encoded) == value
    assert json_form.loads(json.dumps(value, separators=(",", ":")).encode()) == value


def test_compact_and_utf8() -> None:
    assert json_form.dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()


def test_numpy_scalars_are_numbers() -> None:
    assert json_form.dumps({"x": np.float64(1.5), "n": np.int64(3)}) == b'{"x":1.5,"n":3}'


def test_lone_surrogate_falls_back_to_escapes() -> None:
    encoded = json_form.dumps({"text": "a\ud800b"})
    assert encoded == b'{"text":"a\\ud800b"}'
    assert json_form.loads(encoded) == {"text": "a\ud800b"}


def test_reads_non_finite_floats_written_by_json() -> None:
    legacy = json.dumps({"sum": math.inf, "nan": math.nan}).encode()
    decoded = json_form.loads(legacy)
    assert decoded["sum"] == math.inf
    assert math.isnan(decoded["nan"])
