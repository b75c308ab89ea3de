"""Step-switch follow-ups: a request that moves to the NEXT step of a workflow, said
elliptically ("now book it" after a flight search), read with the agent's previous step
(docs/ranking.md, Sessions, "Follow-up requests"; the set: benches/README.md, "Step-switch
follow-ups").

Development data (built here, deterministically, from ../shared/devset and
../shared/devset/multistep, each set in a store of its own, never mixed):

- **Switches.** Every workflow of the set (a multi-tool execution, repeats collapsed) gives,
  for each step k followed by a step k+1 whose tool has requests of its own (default set:
  single-tool dev *queries*, never captured; multistep set: single-tool executions' requests,
  captured), one switch: the previous step is step k's tool, the next step's request is one
  of those texts drawn by a generator seeded with the workflow id and k, and the follow-up
  is that request said elliptically by `elliptical`. Switches with the same previous tool,
  next tool and request are asked once.
- **The elliptical rule** (`elliptical`): the request's words, lowercased; its verb is the
  first word in `VERBS` (a fixed list of action verbs, base forms) not right after a
  determiner ("a file") and not in `GENERIC_VERBS` (get, give, provide, tell, show, find,
  make, look, fetch, retrieve), else the first such generic verb; its object the first word
  after the verb of three letters or more that is not in `FUNCTION_WORDS` (function words
  and a few adjectives such as "recent") and not a number; neither may be the next tool's
  name itself. No verb: no switch. The form is chosen by the switch id's SHA-1 among "Now
  {verb} it.", "Then {verb} the result.", "{Verb} that too.", "Now {verb} the {object}.",
  "OK, next {verb} the {object} for that." (the last two fall back to the first two without
  an object).
- **The same step again** (`repeats`): a follow-up that repeats a step that workflows show
  followed by others, made as `bench_followups` makes its follow-ups; it must stay answered
  by that step.
- **The harm.** The next step's request, whole, after an unrelated previous step (a tool
  never seen before the next one in the set's workflows, drawn by `random.Random(SEED)`).

Memory: the whole set (its workflows captured whole, as multi-step patterns, and its single
steps), streamed into two real `pml serve` (default settings, MiniLM, `fast` durability,
client vectors as in the quality suite): the defaults, and `follow_up_weight = 0` (each
request read alone). Each switch is asked (k = 5) with `context.previous_tools` = the
previous step's tool, and, where that tool has a single-tool execution, with
`context.session_id` after one such execution was recorded under a fresh session id (one
step: nothing learned), and, on the defaults' server, with no context and as an empty intent
after the previous step (`next only`: what usually comes next, the transitions alone). A
switch is right (`next`) when the first suggestion (hit@1) or one of the first five (hit@5)
is the group of the next step's tool alone; `rest` also accepts the group of exactly the
workflow's remaining steps (the rest of the workflow as one step), where the memory holds it
(neither set does: each workflow's tool sequence is its own, so `rest` equals `next` here).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from pml_client._proto.pml.v1 import pml_pb2, resources_pb2

from benches.bench_followups import follow_up
from benches.common import Row
from benches.harness.devset import (
    DEVSET,
    DevExecution,
    DevQuery,
    available,
    load,
    read_executions,
)
from benches.harness.quality_devset import Server, _fill
from benches.harness.quality_vectors import vectors
from pml_server.client import PmlClient

SUITE = "switches"
K = 5
EMBEDDER = "minilm"
SEED = 7
SETS = ("default", "multistep")
FORMS = (
    "Now {verb} it.",
    "Then {verb} the result.",
    "{Verb} that too.",
    "Now {verb} the {object}.",
    "OK, next {verb} the {object} for that.",
)


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


VERBS = _set(
    """
    add analyze analyse apply arrange assess book browse buy calculate cancel change check
    classify compare compile compute configure contact convert create delete deploy describe
    design detect determine download draft draw edit estimate evaluate explain export extract
    fetch filter find fix forecast format generate get give identify import install list load
    locate log look make manage map measure monitor notify optimize order organize parse pay
    perform plan play post predict prepare print process provide publish query rank rate read
    recommend record register remind remove rename render reply report request reserve reset
    resize retrieve review run save scan schedule search select sell send set share show sign
    simulate sort split start stop submit suggest summarize summarise switch sync tell test
    track train transfer translate update upload validate verify view visualize watch write
    """
)
FUNCTION_WORDS = _set(
    """
    a an the me my us our you your it its this that these those some any all each every for
    with from into onto about of on in at to by as and or but if then than so such please also
    can could would will should may might must just more most other out up down over under
    there here what which who whom whose when where why how is are was were be been being do
    does did have has had i i'm i'd we they them their his her he she one ones new
    recent latest current best good specific available different certain particular various
    detailed comprehensive reliable daily high quality few several many much
    """
)
# verbs that say little of the step: a request's first other verb is taken before them
GENERIC_VERBS = _set("get give provide tell show find make look fetch retrieve")
# a word right after these is a noun ("a file", "the order"), never the verb
_DETERMINERS = _set("a an the my your our their his her its this that these those some any")
_WORD = re.compile(r"[a-z][a-z'\-]*|\d[\d.,:]*")


def elliptical(request: str, tool: str, key: str) -> str | None:
    """`request` (the next step's own request) said elliptically after the previous step, by
    the rule of the module's docstring; None when it has no verb of `VERBS`."""
    words = _WORD.findall(request.lower())
    verbs = [
        i
        for i, w in enumerate(words)
        if w in VERBS and w != tool and not (i and words[i - 1] in _DETERMINERS)
    ]
    verb_at = next((i for i in verbs if words[i] not in GENERIC_VERBS), verbs[0] if verbs else None)
    if verb_at is None:
        return None
    verb = words[verb_at]
    obj = next(
        (
            w
            for w in words[verb_at + 1 :]
            if len(w) >= 3 and w not in FUNCTION_WORDS and not w[0].isdigit() and w != tool
        ),
        None,
    )
    h = int(hashlib.sha1(key.encode()).hexdigest(), 16) % len(FORMS)
    if obj is None and h >= 3:
        h -= 3
    form = FORMS[h]
    return form.format(verb=verb, Verb=verb.capitalize(), object=obj or "")


def group_of(tools: Sequence[str]) -> str:
    """The dev sets' group id of a tool sequence (their README)."""
    return "g_" + hashlib.sha1("|".join(tools).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Switch:
    id: str
    previous: str  # step k's tool
    next: str  # step k+1's tool
    rest: tuple[str, ...]  # the workflow's steps from k+1 on
    request: str  # the next step's own request, whole
    text: str  # that request said elliptically
    other: str  # an unrelated previous tool (the harm)


def _collapsed(tools: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for tool in tools:
        if not out or out[-1] != tool:
            out.append(tool)
    return tuple(out)


def load_set(name: str) -> tuple[list[DevExecution], dict[str, list[str]]]:
    """The set's executions and, per tool, the requests of its own (default: single-tool
    queries; multistep: single-tool executions' requests)."""
    if name == "default":
        executions, queries = load()
        own: dict[str, list[str]] = defaultdict(list)
        for q in queries:
            if len(q.tools) == 1:
                own[q.tools[0]].append(q.intent)
        return executions, dict(own)
    executions = read_executions(DEVSET / "multistep" / "executions.jsonl")
    own = defaultdict(list)
    for e in executions:
        if len(e.tools) == 1:
            own[e.tools[0]].append(e.intent)
    return executions, dict(own)


def switches(executions: Sequence[DevExecution], own: dict[str, list[str]]) -> list[Switch]:
    """The set's switches (file order, each (previous, next, request) once)."""
    followed: dict[str, set[str]] = defaultdict(set)
    for e in executions:
        steps = _collapsed(e.tools)
        for n in range(1, len(steps)):
            followed[steps[n]].add(steps[n - 1])
    tools = sorted({t for e in executions for t in e.tools})
    rng = random.Random(SEED)
    seen: set[tuple[str, str, str]] = set()
    out = []
    for e in executions:
        steps = _collapsed(e.tools)
        for n in range(1, len(steps)):
            previous, nxt = steps[n - 1], steps[n]
            if nxt not in own:
                continue
            key = f"{e.id}:{n}"
            request = random.Random(key).choice(own[nxt])
            text = elliptical(request, nxt, key)
            if text is None or (previous, nxt, request) in seen:
                continue
            seen.add((previous, nxt, request))
            other = rng.choice([t for t in tools if t != nxt and t not in followed[nxt]])
            out.append(Switch(key, previous, nxt, steps[n:], request, text, other))
    return out


@dataclass(frozen=True)
class Repeat:
    tool: str  # the previous step, asked again
    text: str  # a follow-up naming other arguments


def repeats(executions: Sequence[DevExecution], own: dict[str, list[str]]) -> list[Repeat]:
    """Same-step follow-ups after a step that workflows show followed by others (where a
    switch reading could pull the request away from repeating it): each such tool with
    requests of its own, one of them (drawn by a generator seeded with the tool) made a
    follow-up by `bench_followups.follow_up`, its first word lowercased first (an imperative
    opener such as "Provide" is no name); tools whose request names nothing are left out."""
    followed = sorted(
        {a for e in executions for a, b in zip(e.tools, e.tools[1:], strict=False) if a != b}
    )
    out = []
    for tool in followed:
        if tool not in own:
            continue
        request = random.Random(f"repeat:{tool}").choice(own[tool])
        request = request[:1].lower() + request[1:]
        text = follow_up(DevQuery(f"repeat:{tool}", request, "", (tool,), ""))
        if text is not None:
            out.append(Repeat(tool, text))
    return out


@dataclass
class Arm:
    next_ranks: list[int]  # rank of the next step's group, 0: not in the top k
    rest_ranks: list[int]  # rank of the next step's or the rest's group
    read: int = 0  # answers read as a follow-up

    def hit(self, k: int, rest: bool = False) -> float:
        ranks = self.rest_ranks if rest else self.next_ranks
        return sum(1 for r in ranks if 0 < r <= k) / max(len(ranks), 1)


def _ranks(
    reply: pml_pb2.SuggestResponse, groups_of: dict[str, str], accepted: Sequence[str]
) -> int:
    groups: list[str] = []
    for s in reply.suggestions:
        g = groups_of.get(s.capability.removeprefix("capabilities/"), s.capability)
        if g not in groups:
            groups.append(g)
    return next((i + 1 for i, g in enumerate(groups) if g in accepted), 0)


@dataclass
class _Asker:
    client: PmlClient
    vec: dict[str, NDArray[np.float32]]
    groups_of: dict[str, str]
    arms: dict[str, Arm]

    def __call__(
        self,
        arm: str,
        text: str,
        switch: Switch | Repeat,
        previous_tools: Sequence[str] = (),
        session_id: str = "",
    ) -> None:
        reply = self.client.suggest(
            text,
            K,
            intent_embedding=self.vec[text].tolist() if text else (),
            previous_tools=previous_tools,
            session_id=session_id,
            plan_size=0,
        )
        a = self.arms.setdefault(arm, Arm([], []))
        if isinstance(switch, Repeat):  # the previous step again
            rank = _ranks(reply, self.groups_of, [group_of([switch.tool])])
            a.next_ranks.append(rank)
            a.rest_ranks.append(rank)
            a.read += int(reply.read_as_follow_up)
            return
        a.next_ranks.append(_ranks(reply, self.groups_of, [group_of([switch.next])]))
        a.rest_ranks.append(
            _ranks(reply, self.groups_of, [group_of([switch.next]), group_of(switch.rest)])
        )
        a.read += int(reply.read_as_follow_up)


def measure(
    name: str, max_switches: int | None = None, readings: Sequence[str] = ("read", "alone")
) -> dict[str, Arm]:
    executions, own = load_set(name)
    asked = switches(executions, own)[:max_switches]
    single: dict[str, list[DevExecution]] = defaultdict(list)
    for e in executions:
        if len(e.tools) == 1:
            single[e.tools[0]].append(e)
    texts = [e.intent for e in executions] + [s.request for s in asked] + [s.text for s in asked]
    again = repeats(executions, own)
    texts += [r.text for r in again]
    vec = dict(zip(texts, vectors(EMBEDDER, texts), strict=True))
    arms: dict[str, Arm] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for reading in readings:
            extra = () if reading == "read" else ("--config", str(_config(Path(tmp))))
            server = Server(Path(tmp) / reading, EMBEDDER, extra)
            try:
                with server.client() as client:
                    store = _fill(client, executions, vec)
                    groups_of = {
                        c.removeprefix("capabilities/"): g for c, g in store.group_of.items()
                    }
                    ask = _Asker(client, vec, groups_of, arms)
                    for s in asked:
                        ask(f"switch, previous tools, {reading}", s.text, s, [s.previous])
                        ask(f"whole after another step, {reading}", s.request, s, [s.other])
                        if reading == "read":
                            ask("switch, no context", s.text, s)
                            ask("next only", "", s, [s.previous])
                            ask("whole, no context", s.request, s)
                    for r in again:
                        ask(f"same step again, {reading}", r.text, r, [r.tool])
                    for s in asked:  # last: their records add uses (never transitions)
                        if s.previous in single:
                            fresh = f"switch-{s.id}"
                            _record(client, random.Random(fresh), single[s.previous], vec, fresh)
                            ask(f"switch, session, {reading}", s.text, s, session_id=fresh)
            finally:
                server.stop()
    return arms


def _record(
    client: PmlClient,
    rng: random.Random,
    choices: Sequence[DevExecution],
    vec: dict[str, NDArray[np.float32]],
    session_id: str,
) -> None:
    e = rng.choice(choices)
    client.record(
        resources_pb2.ExecutionRecord(
            request_id=f"{session_id}-step",
            intent=e.intent,
            code=e.code,
            language=e.language,
            tool_calls=[resources_pb2.ToolCall(tool=t, ok=True) for t in e.tools],
            intent_embedding=vec[e.intent].tolist(),
            session_id=session_id,
        )
    )


def _config(root: Path) -> Path:
    path = root / "switches.toml"
    path.write_text("[engine.ranking]\nfollow_up_weight = 0.0\n", encoding="utf-8")
    return path


def summary(arms: dict[str, Arm]) -> dict[str, dict[str, float]]:
    """hit@1 / hit@5 of each arm, next step alone and with the rest accepted."""
    return {
        arm: {
            "asked": len(a.next_ranks),
            "next hit@1": a.hit(1),
            "next hit@5": a.hit(5),
            "rest hit@1": a.hit(1, rest=True),
            "rest hit@5": a.hit(5, rest=True),
            "read as follow-up": a.read,
        }
        for arm, a in sorted(arms.items())
    }


def rows(max_switches: int | None = None) -> list[Row]:
    out = []
    for name in SETS:
        arms = measure(name, max_switches)
        extra = {"set": name, "arms": summary(arms)}
        out += [
            Row(
                SUITE,
                f"{name}: step switch, next step hit@1, previous_tools",
                arms["switch, previous tools, read"].hit(1),
                "hit@1",
                arms["switch, previous tools, alone"].hit(1),
                "the same context, each request read alone",
                None,
                extra=extra,
            ),
            Row(
                SUITE,
                f"{name}: the same step again, hit@1 with the reading",
                arms["same step again, read"].hit(1),
                "hit@1",
                arms["same step again, alone"].hit(1),
                "the same context, each request read alone",
                None,
                extra=extra,
            ),
            Row(
                SUITE,
                f"{name}: whole requests after an unrelated step, hit@1 with the reading",
                arms["whole after another step, read"].hit(1),
                "hit@1",
                arms["whole after another step, alone"].hit(1) - 0.005,
                "the same requests read alone, less one in 200",
                1.0,
                extra=extra,
            ),
        ]
    return out


def run(large: bool) -> list[Row]:
    if not (available() and (DEVSET / "multistep" / "executions.jsonl").exists()):
        return []
    return rows()


if __name__ == "__main__":
    import sys

    for set_name in sys.argv[1:] or SETS:
        print(set_name, json.dumps(summary(measure(set_name)), indent=1))
