"""A vector checked at the API edge reaches the engine as the array the engine would compute."""

from __future__ import annotations

import numpy as np
import pytest

from pml_server.api.validate import Violations, check_embedding
from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.vectors import CheckedVector, client_vector


def test_checked_vector_equals_the_engines_own_normalization() -> None:
    values = list(np.random.default_rng(3).standard_normal(384) * 7.5)
    out = Violations()
    checked = check_embedding(out, "intent_embedding", values, 384)
    assert not out.items
    assert isinstance(checked, CheckedVector)
    engine_side = client_vector(tuple(values), 384, "intent_embedding")
    assert checked.array.dtype == np.float32
    assert np.array_equal(client_vector(checked, 384, "intent_embedding"), engine_side)
    assert not checked.array.flags.writeable
    assert checked == CheckedVector(engine_side.copy())
    assert list(checked) == engine_side.tolist()


def test_a_checked_vector_of_another_dimension_is_still_refused() -> None:
    checked = CheckedVector(np.ones(8, dtype=np.float32) / np.sqrt(8))
    with pytest.raises(InvalidArgumentError):
        client_vector(checked, 384, "intent_embedding")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ([0.0] * 4, "v"),
        ([1.0, float("nan"), 0.0, 0.0], "v[1]"),
    ],
)
def test_bad_vectors_are_named(values: list[float], field: str) -> None:
    out = Violations()
    assert check_embedding(out, "v", values, 4) is None
    assert [v.field for v in out.items] == [field]
