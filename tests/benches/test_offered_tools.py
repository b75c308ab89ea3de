"""The offered-tool sets of bench_context (benches/README.md, Offered-tool sets): the expected
tools always offered, the distractors the tools nearest them by their intents' mean vector."""

from __future__ import annotations

import numpy as np

from benches.bench_context import offered_tools
from benches.harness.devset import DevExecution, DevQuery


def _execution(n: int, intent: str, tools: tuple[str, ...]) -> DevExecution:
    return DevExecution(f"e{n}", intent, "", "javascript", tools, "g_" + "|".join(tools), "t")


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_expected_tools_first_then_the_nearest_by_intent() -> None:
    vector_of = {
        "make a qr code": _unit(1, 0, 0),
        "qr code for my card": _unit(0.95, 0.1, 0),
        "weather tomorrow": _unit(0, 1, 0),
        "rain in paris": _unit(0.1, 0.95, 0),
        "book a flight": _unit(0, 0, 1),
        "qr code and weather": _unit(0.7, 0.7, 0),
    }
    executions = [
        _execution(0, "make a qr code", ("create_qr_code",)),
        _execution(1, "qr code for my card", ("qreator",)),
        _execution(2, "weather tomorrow", ("weather_tool",)),
        _execution(3, "rain in paris", ("forecast",)),
        _execution(4, "book a flight", ("flights",)),
    ]
    queries = [
        DevQuery("q0", "make a qr code", "g_create_qr_code", ("create_qr_code",), "t"),
        DevQuery("q1", "qr code and weather", "g", ("create_qr_code", "weather_tool"), "t"),
        DevQuery("q2", "book a flight", "g_unknown", ("unknown_tool",), "t"),
    ]
    one = offered_tools(executions, queries, vector_of, distractors=1)
    assert one["q0"] == ("create_qr_code", "qreator")  # its near-synonym, not the flights
    assert set(one["q1"]) >= {"create_qr_code", "weather_tool"}
    assert len(one["q1"]) == 3
    assert one["q2"] == ("unknown_tool",)  # a tool no execution uses: offered alone
    many = offered_tools(executions, queries, vector_of, distractors=10)
    for query in queries[:2]:
        offered = many[query.id]
        assert set(query.tools) <= set(offered)
        assert list(offered) == sorted(set(offered))  # sorted, no order leaked, no repeats
    assert len(many["q0"]) == 5  # every tool of the set, at most
    assert offered_tools(executions, queries, vector_of, distractors=0)["q1"] == (
        "create_qr_code",
        "weather_tool",
    )
