"""Follow-up requests: a request that says too little alone, read with the agent's previous
step (docs/ranking.md, Sessions, "Follow-up requests").

Development data (built here, deterministically, from ../shared/devset alone; the README's
"Follow-up requests" section describes it):

- **Follow-ups.** Each single-tool dev *query* (never captured) naming something (a quoted
  string, a number, or capitalized words other than a sentence's first: "Japan", "Denver",
  "SEO") is turned into what an agent hears next in a conversation that just ran that tool:
  one or two of those names in one of seven elliptical forms ("And what about {X}?", "Same
  for {X}, please.", "Now do it for {X}.", "How about {X}?", "What about {X} instead?", "And
  for {X}?", "Do the same with {X}."), chosen by the query id's hash. It is asked with the
  tool as `context.previous_tools`; the right answer is the tool's single-tool group (the
  agent repeats its step with other arguments). A synthetic probe of one kind of follow-up,
  not a sample of real conversations.
- **The harm.** The same queries, whole, asked after an unrelated previous step (a tool drawn
  by a generator seeded once): the reading must not move them.

Measured through the public API of two real `pml serve` (default settings, MiniLM, `fast`
durability, client vectors as in the quality suite), both holding the whole dev set: one with
the defaults, one with `follow_up_weight = 0` (each request read alone). Rows: follow-up hit@1
with the reading against alone (and against no context at all), and the whole queries'
hit@1 after an unrelated step with the reading against alone (target: no loss beyond one
query in 200).
"""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from benches.common import Row
from benches.harness.devset import DevQuery, available, load
from benches.harness.quality_devset import Server, _fill
from benches.harness.quality_vectors import vectors
from pml_server.client import PmlClient

SUITE = "followups"
K = 5
EMBEDDER = "minilm"
SEED = 7
TEMPLATES = (
    "And what about {X}?",
    "Same for {X}, please.",
    "Now do it for {X}.",
    "How about {X}?",
    "What about {X} instead?",
    "And for {X}?",
    "Do the same with {X}.",
)
# capitalized words that open a request rather than name something
_OPENERS = frozenset(
    [
        "I",
        "I'm",
        "I'd",
        "I've",
        "Can",
        "Could",
        "Please",
        "What",
        "How",
        "Is",
        "Are",
        "Do",
        "Does",
        "My",
        "The",
        "A",
        "An",
        "Hi",
        "Hey",
        "Help",
        "Find",
        "Show",
        "Give",
        "Tell",
        "Get",
        "Search",
        "Which",
        "Where",
        "When",
        "Who",
        "Why",
        "Also",
        "And",
        "Then",
        "Let",
        "Let's",
        "It",
        "This",
        "That",
        "Would",
        "Will",
        "Should",
        "Any",
        "Some",
        "Me",
    ]
)
_QUOTED = re.compile(r"[\"']([^\"']{2,40})[\"']")
_NAMED = re.compile(r"\b[A-Z][\w\-&.]*(?:\s+[A-Z][\w\-&.]*)*|\b\d[\d.,:/x%]*\s*\w*")


def names(text: str) -> list[str]:
    """What the request names: quoted strings, then capitalized runs and numbers (openers
    dropped), in order."""
    found = _QUOTED.findall(text)
    for run in _NAMED.findall(text):
        words = [w for w in run.split() if w not in _OPENERS]
        if words:
            found.append(" ".join(words))
    return [n for n in (f.strip(" .,?") for f in found) if len(n) >= 2]


def follow_up(query: DevQuery) -> str | None:
    """The elliptical follow-up made of `query` (None when it names nothing)."""
    named = names(query.intent)
    if not named:
        return None
    h = int(hashlib.sha1(query.id.encode()).hexdigest(), 16)
    x = " and ".join(named[:2]) if len(named) > 1 and h % 3 == 0 else named[0]
    return TEMPLATES[h % len(TEMPLATES)].format(X=x)


@dataclass(frozen=True)
class Probe:
    query: DevQuery
    text: str  # the follow-up
    other: str  # an unrelated previous tool (the harm)


def probes(queries: Sequence[DevQuery]) -> list[Probe]:
    single = [q for q in queries if len(q.tools) == 1]
    tools = sorted({q.tools[0] for q in single})
    rng = random.Random(SEED)
    out = []
    for q in single:
        text = follow_up(q)
        if text is not None:
            other = rng.choice([t for t in tools if t != q.tools[0]])
            out.append(Probe(q, text, other))
    return out


def _first_group(
    client: PmlClient,
    text: str,
    vector: NDArray[np.float32],
    previous: str | None,
    group_of: dict[str, str],
) -> str:
    reply = client.suggest(
        text,
        K,
        intent_embedding=vector.tolist(),
        previous_tools=[previous] if previous else (),
        plan_size=0,
    )
    if not reply.suggestions:
        return ""
    cap = reply.suggestions[0].capability.removeprefix("capabilities/")
    return group_of.get(cap, cap)


def measure(max_probes: int | None = None) -> dict[str, list[bool]]:
    executions, queries = load()
    asked = probes(queries)[:max_probes]
    texts = [e.intent for e in executions] + [q.intent for q in queries] + [p.text for p in asked]
    vec = dict(zip(texts, vectors(EMBEDDER, texts), strict=True))
    arms: dict[str, list[bool]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for reading, extra in (
            ("read", ()),
            ("alone", ("--config", str(_config(Path(tmp), follow_up_weight=0.0)))),
        ):
            server = Server(Path(tmp) / reading, EMBEDDER, extra)
            try:
                with server.client() as client:
                    store = _fill(client, executions, vec)
                    group_of = {
                        c.removeprefix("capabilities/"): g for c, g in store.group_of.items()
                    }
                    _ask_all(client, asked, vec, group_of, reading, arms)
            finally:
                server.stop()
    return arms


def _ask_all(
    client: PmlClient,
    asked: Sequence[Probe],
    vec: dict[str, NDArray[np.float32]],
    group_of: dict[str, str],
    reading: str,
    arms: dict[str, list[bool]],
) -> None:
    """Each probe's follow-up after its tool, and its query whole after an unrelated one (and,
    with the reading on, the follow-up without a context): right when the first suggestion is
    the query's group."""
    for p in asked:
        tool, group, whole = p.query.tools[0], p.query.group, p.query.intent
        asks = [
            (f"follow-up, {reading}", p.text, tool),
            (f"whole after another step, {reading}", whole, p.other),
        ]
        if reading == "read":
            asks.append(("follow-up, no context", p.text, None))
        for arm, text, previous in asks:
            got = _first_group(client, text, vec[text], previous, group_of)
            arms.setdefault(arm, []).append(got == group)


def _config(root: Path, **ranking: float) -> Path:
    path = root / "followups.toml"
    path.write_text(
        "[engine.ranking]\n" + "".join(f"{k} = {v}\n" for k, v in ranking.items()),
        encoding="utf-8",
    )
    return path


def _hit(arm: Sequence[bool]) -> float:
    return sum(arm) / max(len(arm), 1)


def rows(max_probes: int | None = None) -> list[Row]:
    arms = measure(max_probes)
    asked = len(arms["follow-up, read"])
    extra = {"asked": asked, **{f"{arm} hit@1": _hit(hits) for arm, hits in arms.items()}}
    return [
        Row(
            SUITE,
            "follow-up hit@1, read with the previous step",
            _hit(arms["follow-up, read"]),
            "hit@1",
            _hit(arms["follow-up, alone"]),
            "the same context, each request read alone",
            None,
            extra=extra,
        ),
        Row(
            SUITE,
            "whole requests after an unrelated step, hit@1 with the reading",
            _hit(arms["whole after another step, read"]),
            "hit@1",
            _hit(arms["whole after another step, alone"]) - 0.005,
            "the same requests read alone, less one in 200",
            1.0,
            extra=extra,
        ),
    ]


def run(large: bool) -> list[Row]:
    return rows() if available() else []
