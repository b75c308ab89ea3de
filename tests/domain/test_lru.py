"""The one bounded LRU (pml_server/domain/lru.py): against a plain list model of recency, by
count and by weight."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.domain.lru import Lru


def test_count_bound_evicts_the_least_recently_used() -> None:
    lru: Lru[str, int] = Lru(2)
    assert lru.put("a", 1) == []
    assert lru.put("b", 2) == []
    assert lru.get("a") == 1  # a is now newer than b
    assert lru.put("c", 3) == [("b", 2)]
    assert list(lru) == ["a", "c"]
    assert lru.get("b") is None
    assert len(lru) == 2
    assert lru.weight == 2


def test_peek_keeps_recency_and_pop_frees_weight() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.peek("a") == 1  # a stays the oldest
    assert lru.put("c", 3) == [("a", 1)]
    assert lru.pop("b") == 2
    assert lru.pop("b") is None
    assert lru.weight == 1
    assert "c" in lru
    assert "b" not in lru
    lru.clear()
    assert len(lru) == 0
    assert lru.weight == 0


def test_weight_bound_and_an_entry_heavier_than_the_bound() -> None:
    lru: Lru[str, bytes] = Lru(10, weigh=lambda key, value: len(key) + len(value))
    assert lru.put("a", b"1234") == []  # 5
    assert lru.put("b", b"123") == []  # 4, total 9
    assert lru.put("c", b"1") == [("a", b"1234")]  # 2: 11 > 10, the oldest goes
    assert lru.weight == 6
    assert lru.put("big", b"12345678") == [("big", b"12345678")]  # 11 alone: not kept
    assert "big" not in lru
    assert lru.weight == 6
    assert lru.put("b", b"") == []  # replacing re-weighs: 1 instead of 4
    assert lru.weight == 3
    assert list(lru) == ["c", "b"]


ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "get", "peek", "pop"]),
        st.integers(0, 6),
        st.integers(0, 5),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), ops)
def test_matches_a_model_of_recency_and_weight(
    bound: int, operations: list[tuple[str, int, int]]
) -> None:
    lru: Lru[int, int] = Lru(bound, weigh=lambda key, value: value + 1)
    model: list[tuple[int, int]] = []  # (key, value), least recently used first
    for op, key, value in operations:
        found = next((v for k, v in model if k == key), None)
        if op == "get":
            assert lru.get(key) == found
            if found is not None:
                model = [(k, v) for k, v in model if k != key] + [(key, found)]
        elif op == "peek":
            assert lru.peek(key) == found
        elif op == "pop":
            assert lru.pop(key) == found
            model = [(k, v) for k, v in model if k != key]
        else:
            model = [(k, v) for k, v in model if k != key]
            expected_evicted = []
            if value + 1 > bound:
                expected_evicted = [(key, value)]
            else:
                model.append((key, value))
                while sum(v + 1 for _, v in model) > bound:
                    expected_evicted.append(model.pop(0))
            assert lru.put(key, value) == expected_evicted
        assert list(lru) == [k for k, _ in model]
        assert lru.weight == sum(v + 1 for _, v in model) <= bound
