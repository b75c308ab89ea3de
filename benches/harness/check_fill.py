"""Is the bulk fill (`benches/harness/fill.py` `bulk_record_new`) the same store as a fill by
`record_many` batches, and how much faster is it? Run as:

    python -m benches.harness.check_fill COUNT [COUNT ...]

For each COUNT, fills two fresh stores with the service bench's executions 0..COUNT (client
vectors): one by `record_many` batches in two threads (`record_all`), one by the bulk fill;
prints both fill times (wall and this process's CPU), then fails unless the stores are the
same up to the random ids, the intent ids and the clock (`store_contents`: every pattern,
counters, intent, capability, request answer and tenant stats, and how many rows each column
family holds), and unless the lexical index answers fixed queries alike. It prints how many of
fixed Suggest queries get the same answers (pattern code hashes and semantic scores): the
vector index is approximate and its graph depends on insertion order, so two `record_many`
fills (two racing threads) already disagree on a few queries in twenty."""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benches.harness import service_workload as work
from benches.harness.service_server import TENANT, populate
from pml_server.capture.normalize import normalize
from pml_server.config import EngineConfig
from pml_server.domain.model import SuggestQuery
from pml_server.service import Engine
from pml_server.storage import keys
from pml_server.storage.repo import Repository
from testing.store_rows import all_patterns

QUERIES = 20
# every column family (the list the store opens)
FAMILIES = keys.COLUMN_FAMILIES


def batched_fill(data_dir: Path, count: int) -> None:
    populate(data_dir, count, "minilm", with_vectors=True, bulk=False)


def bulk_fill(data_dir: Path, count: int) -> None:
    populate(data_dir, count, "minilm", with_vectors=True, bulk=True)


def _open(data_dir: Path) -> Engine:
    config = EngineConfig(data_dir=data_dir, embedder="minilm", durability="fast")
    engine = Engine.open(config, normalizer=normalize)
    if not engine.admin.wait_ready(600):
        raise RuntimeError("engine index did not become ready")
    return engine


def _timeless(record: Any, *drop: str) -> dict[str, Any]:
    """A record's fields without its clock readings and the fields named in `drop`."""
    fields = dataclasses.asdict(record)
    return {k: v for k, v in fields.items() if not k.endswith("_ms") and k not in drop}


def store_contents(engine: Engine) -> dict[str, Any]:
    """What the store holds for the bench tenant, keyed by code hash (pattern and capability
    ids are random, intent ids come in capture order, times are the clock's)."""
    state = engine._state  # reading every row: the repository, not the API
    repo = state.repo
    patterns = {}
    for pattern in all_patterns(repo, TENANT):
        counters = repo.patterns.counters(TENANT, pattern.id)
        capability = repo.capabilities.capability(TENANT, pattern.capability_id)
        if capability is None or counters is None:
            raise SystemExit(f"pattern {pattern.id}: no capability or counters")
        members = sorted(
            p.code_hash
            for pid in capability.pattern_ids
            if (p := repo.patterns.pattern(TENANT, pid)) is not None
        )
        stored = repo.intents.of_pattern(TENANT, pattern.id)
        intents = sorted(
            (i.text, i.hit_count, i.model_id, tuple(float(x) for x in i.vector)) for i in stored
        )
        # the shown intents are named by id: by their texts instead
        text_of = {i.id: i.text for i in stored}
        shown = [[text_of.get(i, i), hits] for i, hits in counters.top_intents or []]
        patterns[pattern.code_hash] = {
            "pattern": _timeless(pattern, "id", "capability_id"),
            "counters": {**_timeless(counters), "top_intents": shown},
            "intents": intents,
            "capability": (capability.tools, members),
            "hash_row": repo.patterns.pattern_id_for_hash(TENANT, pattern.code_hash) == pattern.id,
        }
    answers = {}
    for key, raw in repo.requests.request_rows(TENANT):
        answer = json.loads(raw)
        answered = repo.patterns.pattern(TENANT, answer.pop("pattern_id"))
        capability_id = answer.pop("capability_id")
        answer.pop("time_ms")
        if answered is None or answered.capability_id != capability_id:
            raise SystemExit(f"request {key!r}: answers a pattern the store does not hold")
        answers[key] = (answered.code_hash, answer)
    rows = {cf: len(state.store.scan(cf, b"")) for cf in FAMILIES}
    return {
        "stats": dataclasses.asdict(repo.meta.stats(TENANT)),
        "patterns": patterns,
        "answers": answers,
        "rows": rows,
    }


def lexical_answers(engine: Engine) -> list[list[tuple[str, float]]]:
    """The lexical index's hits for fixed query texts, as (code hash, rounded score): every
    hit, since many documents score alike and which of them a cut keeps follows the random
    pattern ids."""
    state = engine._state
    index = state.indexes.for_tenant(TENANT)
    out = []
    for j in range(QUERIES):
        hits = index.lexical_hits(work.query_text(j), index.vector_count())
        out.append(sorted((code_hash_of(state.repo, pid), round(score, 4)) for pid, score in hits))
    return out


def code_hash_of(repo: Repository, pattern_id: str) -> str:
    pattern = repo.patterns.pattern(TENANT, pattern_id)
    return pattern.code_hash if pattern is not None else f"missing {pattern_id}"


Answer = list[tuple[str, float]]


def suggest_answers(engine: Engine) -> list[Answer]:
    """For each fixed query vector, the suggested patterns' code hashes with their semantic
    scores (sorted: suggestions with equal scores come in storage order)."""
    answers = []
    for j, vector in enumerate(work.query_vectors(QUERIES)):
        query = SuggestQuery(
            work.query_text(j), k=5, intent_embedding=tuple(vector.tolist()), min_match=0.0
        )
        answers.append(
            sorted(
                (x.pattern.code_hash, round(x.score.semantic, 5))
                for x in engine.suggest(TENANT, query).suggestions
            )
        )
    return answers


def summary(data_dir: Path) -> tuple[dict[str, Any], list[Answer], list[Answer], int]:
    engine = _open(data_dir)
    try:
        vectors = engine._state.indexes.for_tenant(TENANT).vector_count()
        return store_contents(engine), lexical_answers(engine), suggest_answers(engine), vectors
    finally:
        engine.close()


def _timed(fill: Callable[[Path, int], None], data_dir: Path, count: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fill(data_dir, count)
    return time.perf_counter() - wall, time.process_time() - cpu


def compare(count: int, root: Path) -> int:
    """Fill both stores of `count` executions under `root`, print the times, raise
    SystemExit if they differ; returns how many Suggest answers are equal."""
    old, new = root / "record_many", root / "bulk"
    old_wall, old_cpu = _timed(batched_fill, old, count)
    new_wall, new_cpu = _timed(bulk_fill, new, count)
    print(
        f"{count} intents: record_many {old_wall:.1f} s wall {old_cpu:.1f} s CPU; "
        f"bulk {new_wall:.1f} s wall {new_cpu:.1f} s CPU; "
        f"wall ratio {old_wall / new_wall:.1f}x, CPU ratio {old_cpu / new_cpu:.1f}x",
        flush=True,
    )
    old_contents, old_lexical, old_suggest, old_vectors = summary(old)
    new_contents, new_lexical, new_suggest, new_vectors = summary(new)
    for part in ("stats", "rows", "answers", "patterns"):
        if old_contents[part] != new_contents[part]:
            raise SystemExit(f"{count} intents: the stores' {part} differ")
    if old_vectors != new_vectors or old_vectors != count:
        raise SystemExit(f"vector index sizes differ: {old_vectors} vs {new_vectors}")
    if old_lexical != new_lexical:
        raise SystemExit(f"{count} intents: the lexical indexes answer differently")
    same = sum(a == b for a, b in zip(old_suggest, new_suggest, strict=True))
    print(
        f"  same store ({new_contents['stats']}, rows {new_contents['rows']}), same lexical "
        f"answers; {same} of {QUERIES} Suggest answers equal",
        flush=True,
    )
    return same


def main(counts: list[int]) -> None:
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="pml-fill-") as tmp:
            compare(count, Path(tmp))


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [5000])
