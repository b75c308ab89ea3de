"""Suggest from what the agent just did: sessions (docs/ranking.md, Sessions).

Development data (built here, deterministically, from ../shared/devset alone; the README's
"Sessions" section describes it):

- **Sessions.** Every multi-tool execution of the default dev set (MetaTool pairs and NESTFUL
  sequences) whose tools each also have single-tool executions and single-tool queries in
  the set is one session: its tool sequence (repeats collapsed) is the agent's steps, one
  tool a step. 414 multi-tool executions qualify, most of them MetaTool two-tool requests
  (whose tool order is the set's alphabetical order: a label, not a real order; the bench
  measures the signal's mechanics on it, not the order agents use).
- **Steps.** A train step is recorded as one of that tool's single-tool executions (its
  request text, code and vector: the store already holds the pattern, so recording it counts
  a use, and the session teaches one transition). A test step's query is one of that tool's
  single-tool dev *queries* (never captured), drawn by the session's own seed.
- **Split.** Sessions are split by sha1("session:" + execution id): first byte < 64 (a
  quarter) are held apart as test sessions, the rest train. Only train sessions are recorded
  with session ids, so every transition is learned from train sessions alone. A test
  session's own execution (its workflow, captured whole) is held apart too: the store holds
  the dev set's other executions.

Measured through the public API of a real `pml serve` (default settings, MiniLM, `fast`
durability, client vectors as in the quality suite): the dev set but the test sessions'
executions is streamed in; every test step after the first is asked (k = 5) with its query
text, first with only the stored workflows to learn from:

- `none, workflows only`: no context;
- `workflows`: `context.previous_tools` = the previous step's tool, no session recorded yet
  (what the workflows captured whole teach, docs/ranking.md, Sessions, "Workflows");

then the train sessions are recorded step by step (`RecordExecution` with `session_id`) and
each test step is asked again:

- `none`: no context (the baseline: Suggest without a context);
- `previous tools`: `context.previous_tools` = the previous step's tool;
- `next only`: the `previous tools` context with an empty intent ("what usually comes next");
- `off path` (the harm): a previous step this tool never followed (in the store's executions
  or the train sessions) whose usual successors include a tool of the `none` answer's top 5,
  against `none, off path`, the same requests without a context; asked where such a step
  exists;
- `session`: the previous step recorded first under a fresh session id of its own (so no
  transition is learned from it), then `context.session_id` = that id.

Rows: next-step hit@1 / hit@5 / MRR of each arm; target (issue): hit@1 with the session's
previous step >= without + 0.10, and the same for the workflows alone. Suggest p50 (client
wall time, same run) with and without a context.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from pml_client._proto.pml.v1 import pml_pb2, resources_pb2

from benches.common import Row
from benches.harness.devset import DevExecution, DevQuery, available, load
from benches.harness.quality_devset import Server, _fill
from benches.harness.quality_vectors import vectors
from pml_server.client import PmlClient

SUITE = "sessions"
K = 5
EMBEDDER = "minilm"
ARMS = (
    "none",
    "previous tools",
    "session",
    "next only",
    "off path",
    "none, off path",
    "none, workflows only",
    "workflows",
)


@dataclass(frozen=True)
class Session:
    id: str
    tools: tuple[str, ...]
    test: bool


def _collapsed(tools: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for tool in tools:
        if not out or out[-1] != tool:
            out.append(tool)
    return tuple(out)


def _held_apart(execution_id: str) -> bool:
    return hashlib.sha1(f"session:{execution_id}".encode()).digest()[0] < 64


def group_of_tool(tool: str) -> str:
    """The dev set's group id of the one-tool sequence `tool` (its README)."""
    return "g_" + hashlib.sha1(tool.encode()).hexdigest()[:10]


def sessions(
    executions: Sequence[DevExecution], queries: Sequence[DevQuery]
) -> tuple[list[Session], dict[str, list[DevExecution]], dict[str, list[DevQuery]]]:
    """The sessions (file order), and each tool's single-tool executions and queries."""
    single_exec: dict[str, list[DevExecution]] = defaultdict(list)
    single_query: dict[str, list[DevQuery]] = defaultdict(list)
    for e in executions:
        if len(e.tools) == 1:
            single_exec[e.tools[0]].append(e)
    for q in queries:
        if len(q.tools) == 1:
            single_query[q.tools[0]].append(q)
    found = []
    for e in executions:
        steps = _collapsed(e.tools)
        if len(steps) >= 2 and all(t in single_exec and t in single_query for t in steps):
            found.append(Session(e.id, steps, _held_apart(e.id)))
    return found, single_exec, single_query


@dataclass
class Arm:
    ranks: list[int]  # 0: not in the top k
    seconds: list[float]

    def hit(self, k: int) -> float:
        return sum(1 for r in self.ranks if 0 < r <= k) / max(len(self.ranks), 1)

    def mrr(self) -> float:
        return sum(1.0 / r for r in self.ranks if r > 0) / max(len(self.ranks), 1)


def _groups(reply: pml_pb2.SuggestResponse, group_of: dict[str, str]) -> list[str]:
    groups: list[str] = []
    for s in reply.suggestions:
        group = group_of.get(s.capability.removeprefix("capabilities/"), s.capability)
        if group not in groups:
            groups.append(group)
    return groups


def _rank(reply: pml_pb2.SuggestResponse, group_of: dict[str, str], expected: str) -> int:
    groups = _groups(reply, group_of)
    return groups.index(expected) + 1 if expected in groups else 0


def measure(max_sessions: int | None = None) -> dict[str, Arm]:
    executions, queries = load()
    found, single_exec, single_query = sessions(executions, queries)
    train = [s for s in found if not s.test]
    test = [s for s in found if s.test][:max_sessions]
    held_apart = {s.id for s in found if s.test}
    # a test session's own execution is its workflow: held apart like its steps
    stored = [e for e in executions if e.id not in held_apart]
    texts = [e.intent for e in executions] + [q.intent for q in queries]
    vec = dict(zip(texts, vectors(EMBEDDER, texts), strict=True))
    arms = {name: Arm([], []) for name in ARMS}
    asked = _asked(test, single_query)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "data", EMBEDDER)
        try:
            with server.client() as client:
                store = _fill(client, stored, vec)
                group_of = {c.removeprefix("capabilities/"): g for c, g in store.group_of.items()}
                ask = _Asker(client, vec, group_of, arms)
                for session, n, query in asked:  # only the stored workflows teach yet
                    ask("none, workflows only", session.tools[n], query.intent)
                    ask("workflows", session.tools[n], query.intent, [session.tools[n - 1]])
                for session in train:
                    rng = random.Random(session.id)
                    for n, tool in enumerate(session.tools):
                        _record_step(client, rng, single_exec[tool], vec, session.id, n)
                _ask(ask, client, asked, found, stored, single_exec, vec)
        finally:
            server.stop()
    return arms


def _record_step(
    client: PmlClient,
    rng: random.Random,
    choices: Sequence[DevExecution],
    vec: dict[str, NDArray[np.float32]],
    session_id: str,
    n: int,
) -> None:
    e = rng.choice(choices)
    record = resources_pb2.ExecutionRecord(
        request_id=f"{session_id}-step-{n}",
        intent=e.intent,
        code=e.code,
        language=e.language,
        tool_calls=[resources_pb2.ToolCall(tool=t, ok=True) for t in e.tools],
        intent_embedding=vec[e.intent].tolist(),
        session_id=session_id,
    )
    client.record(record)


def _asked(
    test: Sequence[Session], single_query: dict[str, list[DevQuery]]
) -> list[tuple[Session, int, DevQuery]]:
    """Each test session's steps after the first, with one of the step's tool's queries."""
    asked: list[tuple[Session, int, DevQuery]] = []
    for session in test:
        rng = random.Random(f"test:{session.id}")
        for n in range(1, len(session.tools)):
            asked.append((session, n, rng.choice(single_query[session.tools[n]])))
    return asked


@dataclass
class _Asker:
    client: PmlClient
    vec: dict[str, NDArray[np.float32]]
    group_of: dict[str, str]
    arms: dict[str, Arm]

    def __call__(
        self,
        arm: str,
        tool: str,
        intent: str,
        previous_tools: list[str] | None = None,
        session_id: str = "",
    ) -> list[str]:
        """Ask; the answer's groups, best first."""
        context: dict[str, object] = {}
        if intent:
            context["intent_embedding"] = self.vec[intent].tolist()
        if previous_tools:
            context["previous_tools"] = previous_tools
        if session_id:
            context["session_id"] = session_id
        began = time.perf_counter()
        reply = self.client.suggest(intent, K, **context)  # type: ignore[arg-type]
        self.arms[arm].seconds.append(time.perf_counter() - began)
        self.arms[arm].ranks.append(_rank(reply, self.group_of, group_of_tool(tool)))
        return _groups(reply, self.group_of)


def _off_path(
    found: Sequence[Session], stored: Sequence[DevExecution]
) -> tuple[dict[str, set[str]], list[str]]:
    """Which tools ever followed each tool (in the stored executions and every train
    session), and the tools that were ever followed by one, sorted."""
    followed: dict[str, set[str]] = defaultdict(set)
    sequences = [_collapsed(e.tools) for e in stored] + [s.tools for s in found if not s.test]
    for tools in sequences:
        for before, after in itertools.pairwise(tools):
            followed[before].add(after)
    return followed, sorted(followed)


def _ask(
    ask: _Asker,
    client: PmlClient,
    asked: Sequence[tuple[Session, int, DevQuery]],
    found: Sequence[Session],
    stored: Sequence[DevExecution],
    single_exec: dict[str, list[DevExecution]],
    vec: dict[str, NDArray[np.float32]],
) -> None:
    followed, leading = _off_path(found, stored)
    tool_of = {group_of_tool(t): t for t in leading} | {
        group_of_tool(t): t for ts in followed.values() for t in ts
    }
    for session, n, query in asked:
        tool, previous = session.tools[n], [session.tools[n - 1]]
        answer = ask("none", tool, query.intent)
        ask("previous tools", tool, query.intent, previous)
        ask("next only", tool, "", previous)
        # the harm: a previous step this tool never followed, whose usual successors include
        # a tool of the answer without a context (a competitor the context lifts)
        rivals = {tool_of[g] for g in answer[:K] if g in tool_of} - {tool}
        wrong = [t for t in leading if tool not in followed[t] and followed[t] & rivals]
        if wrong:
            ask("none, off path", tool, query.intent)
            ask("off path", tool, query.intent, [random.Random(f"off:{query.id}").choice(wrong)])
    for session, n, query in asked:  # last: their records add uses (never transitions)
        fresh = f"test-{session.id}-{n}"
        _record_step(client, random.Random(fresh), single_exec[session.tools[n - 1]], vec, fresh, 0)
        ask("session", session.tools[n], query.intent, session_id=fresh)


def rows(max_sessions: int | None = None) -> list[Row]:
    executions, queries = load()
    found, _, _ = sessions(executions, queries)
    arms = measure(max_sessions)
    none = arms["none"]
    counts = Counter("test" if s.test else "train" for s in found)
    extra = {"sessions": dict(counts), "next steps asked": len(none.ranks)}
    out = []
    # (arm, its baseline arm, target: at least the baseline + 0.10, or None: reported)
    compared = (
        ("previous tools", "none", True),
        ("session", "none", True),
        ("workflows", "none, workflows only", True),
        ("next only", "none", False),
        ("off path", "none, off path", False),
    )
    for arm, base, target in compared:
        got, without = arms[arm], arms[base]
        named = {
            "none, workflows only": "no context, before any session",
            "none, off path": "no context, the same requests",
        }.get(base, "no context")
        out.append(
            Row(
                SUITE,
                f"next-step hit@1, {arm}",
                got.hit(1),
                "hit@1",
                without.hit(1) + 0.10 if target else without.hit(1),
                f"{named} hit@1" + (" + 0.10" if target else ""),
                1.0 if target else None,
                extra={
                    **extra,
                    "asked": len(got.ranks),
                    "no context hit@1": without.hit(1),
                    "hit@5": got.hit(5),
                    "no context hit@5": without.hit(5),
                    "MRR": got.mrr(),
                    "no context MRR": without.mrr(),
                },
            )
        )
    p50 = {arm: statistics.median(a.seconds) * 1000 for arm, a in arms.items()}
    out.append(
        Row(
            SUITE,
            "Suggest p50 with previous tools (client wall time)",
            p50["previous tools"],
            "ms",
            p50["none"],
            "without a context, same run",
            lower_is_better=True,
            extra={"session p50": p50["session"], "next only p50": p50["next only"]},
        )
    )
    return out


def run(large: bool) -> list[Row]:
    return rows() if available() else []
