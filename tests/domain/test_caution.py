"""The cautions shown beside a suggestion (docs/ranking.md, Weak matches): a tool that does
another kind of action than the request's verb, and a match under the weak line."""

from __future__ import annotations

import pytest

from pml_server.domain.caution import WEAK_MATCH, cautions


def test_the_readme_case_a_read_request_answered_by_a_write_tool() -> None:
    found = cautions("Load a JSON file", ["write_file"], 0.79)
    assert [c.kind for c in found] == ["contradicts"]
    assert found[0].reason == "the request reads ('load'); its tools only write (write_file)"


@pytest.mark.parametrize(
    ("intent", "tools"),
    [
        ("Load a JSON file", ["read_file", "parse_json"]),  # same kind
        ("Copy a.json to b.json", ["read_file", "write_file"]),  # no verb of a known kind
        ("Update the config file", ["read_file", "write_file"]),  # one tool writes
        ("Load a JSON file", ["parse_json"]),  # parse is a read
        ("Summarize the news", ["news_tool"]),  # the tool's name says no kind
        ("Send an email to my boss", ["gmail_send"]),
        ("Send an email to my boss", ["sendEmail"]),  # camelCase split
    ],
)
def test_no_caution_when_nothing_contradicts(intent: str, tools: list[str]) -> None:
    assert cautions(intent, tools, 0.9) == []


@pytest.mark.parametrize(
    ("intent", "tools", "reason"),
    [
        ("Save the report", ["read_file"], "the request writes ('save'); its tools only read"),
        ("Delete old branches", ["list_branches"], "the request deletes ('delete'); its tools"),
        ("Please read my email", ["send_email"], "the request reads ('read'); its tools only send"),
        ("Read a file", ["DeleteFile"], "its tools only delete (DeleteFile)"),
    ],
)
def test_a_contradiction_names_both_kinds(intent: str, tools: list[str], reason: str) -> None:
    found = cautions(intent, tools, 0.9)
    assert [c.kind for c in found] == ["contradicts"]
    assert reason in found[0].reason


def test_a_weak_match_says_so_with_its_value() -> None:
    assert cautions("Summarize the news", ["news_tool"], WEAK_MATCH) == []
    found = cautions("Summarize the news", ["news_tool"], WEAK_MATCH - 0.08)
    assert [c.kind for c in found] == ["weak"]
    assert f"weak match {WEAK_MATCH - 0.08:.2f}" in found[0].reason
    both = cautions("Load a JSON file", ["write_file"], 0.2)
    assert [c.kind for c in both] == ["contradicts", "weak"]


@pytest.mark.parametrize("intent", ["", "   "])
def test_a_request_without_words_gets_no_weak_caution(intent: str) -> None:
    # "What usually comes next" (an empty intent and the previous step) matches nothing by
    # construction: calling its answer a weak match would say the stored intents disagree
    assert cautions(intent, ["tail_file"], 0.0) == []
