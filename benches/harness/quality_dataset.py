"""The labelled data of the quality benchmark, expanded deterministically from
benches/data/quality_capabilities.json (hand-written templates).

Every capability gives one execution per training intent (its slots filled with values drawn by
a seeded generator, the same values in the intent and the code: literal variations of one
pattern) and its held-out queries, which are never captured.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "quality_capabilities.json"
SEED = 20_260_601


@dataclass(frozen=True)
class LabelledExecution:
    label: str
    intent: str
    code: str
    language: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class HeldOutQuery:
    label: str
    text: str


def _fill(template: str, values: dict[str, str]) -> str:
    # str.replace, not str.format: the code holds other braces (f-strings, object literals).
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def load(
    path: Path = DATA, split: str = "queries"
) -> tuple[list[LabelledExecution], list[HeldOutQuery]]:
    """The executions and the queries of `split`: "queries" (held out, reported) or
    "dev_queries" (held out too, used only to calibrate the ranking defaults)."""
    spec = json.loads(path.read_text())
    rng = random.Random(SEED)
    executions: list[LabelledExecution] = []
    queries: list[HeldOutQuery] = []
    for cap in spec["capabilities"]:
        for intent in cap["intents"]:
            values = {name: rng.choice(options) for name, options in cap["slots"].items()}
            executions.append(
                LabelledExecution(
                    label=cap["label"],
                    intent=_fill(intent, values),
                    code=_fill(cap["code"], values),
                    language=cap["language"],
                    tools=tuple(cap["tools"]),
                )
            )
        queries.extend(HeldOutQuery(cap["label"], q) for q in cap[split])
    return executions, queries


_VERBS = [
    "read",
    "write",
    "sync",
    "archive",
    "render",
    "validate",
    "merge",
    "split",
    "index",
    "tag",
    "scan",
    "audit",
]
_OBJECTS = [
    "invoice",
    "ledger",
    "thumbnail",
    "webhook",
    "cron",
    "job",
    "sitemap",
    "changelog",
    "locale",
    "bundle",
    "keystore",
    "playlist",
    "firmware",
    "manifest",
    "snapshot",
    "quota",
    "token",
    "certificate",
    "backlog",
    "roster",
    "transcript",
]
_PLACES = [
    "staging",
    "vault",
    "mirror",
    "bucket",
    "queue",
    "cluster",
    "tenant",
    "sandbox",
    "registry",
    "inbox",
]


def filler_intent(n: int) -> tuple[str, tuple[str, ...]]:
    """The n-th synthetic intent and its own tool sequence: a distinct pattern each, so the
    store holds n intents without dedup. Used only to scale the latency measurement."""
    rng = random.Random(n)
    text = (
        f"{rng.choice(_VERBS)} the {rng.choice(_OBJECTS)} {rng.choice(_OBJECTS)} "
        f"in {rng.choice(_PLACES)} {n}"
    )
    tools = (f"svc{n % 997}_{rng.choice(_VERBS)}", f"svc{n // 997}_{rng.choice(_OBJECTS)}")
    return text, tools
