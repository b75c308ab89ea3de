"""The service end to end: a real `pml serve` process on loopback, driven over gRPC by a separate
load-client process (benches/harness/service_load.py), against ceilings measured in the same run.

Ceilings: (a) a null servicer of the same proto on the same gRPC settings
(benches/harness/service_server.py `null`), and our own API layer over an engine whose Suggest
answer is precomputed (`canned`): the share of the gap to (a) that is not the engine's work; (b) the
default model (MiniLM) embedding the same query texts in-process, one text per call (the best of 1
and 8 threads), and what bounds the MiniLM Suggest row on this harness: a servicer that only embeds
the query (`embed-only`: gRPC, protobuf, the load client and the model; no API layer, no engine).
Stores of 10k and 100k intents (100k and 1M with --large) are filled in-process with client
vectors before the server starts; startup is measured from process start to health SERVING,
memory as the server's resident set at SERVING.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

from benches.common import Row
from benches.harness import service_harness as harness
from benches.harness import service_workload as work
from benches.harness.service_harness import Plan

SUITE = "service"


class _Offsets:
    """Request ids for capture runs: every run gets a fresh range, so nothing is a retry."""

    def __init__(self) -> None:
        self.next = 10_000_000

    def take(self, plan: Plan) -> int:
        first = self.next
        self.next += plan.max_requests
        return first


def _suggest_rows(
    label: str, ours: dict[int, dict[str, float]], null: dict[int, dict[str, float]]
) -> list[Row]:
    rows = []
    for c, result in ours.items():
        extra = {"p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"], "count": result["count"]}
        rows.append(
            Row(
                SUITE,
                f"Suggest QPS, {label}, {c} callers",
                result["qps"],
                "req/s",
                null[c]["qps"],
                f"null servicer, {c} callers",
                # No target: the benchmark issue's 0.6x the null servicer, which no server met on
                # this harness, is restated by issue 20 against the API layer alone (rows below).
                extra=extra,
            )
        )
        rows.append(
            Row(
                SUITE,
                f"Suggest p50, {label}, {c} callers",
                result["p50_ms"],
                "ms",
                null[c]["p50_ms"],
                "null servicer",
                lower_is_better=True,
            )
        )
        rows.append(
            Row(
                SUITE,
                f"Suggest p99, {label}, {c} callers",
                result["p99_ms"],
                "ms",
                null[c]["p99_ms"],
                "null servicer",
                lower_is_better=True,
            )
        )
    return rows


def _suggest_sweep(srv: harness.ServerProc, plan: Plan, query: str) -> dict[int, dict[str, float]]:
    """Suggest at each concurrency, each point on an idle server: right after SERVING RocksDB
    may still be flushing and compacting what the open wrote, which belongs to startup."""
    out = {}
    for callers in plan.concurrency:
        srv.wait_idle()
        out[callers] = harness.load(srv.target, "suggest", callers, plan, query)
    return out


def _settled_load(
    srv: harness.ServerProc, op: str, callers: int, plan: Plan, query: str, offset: int = 0
) -> dict[str, float]:
    """A load point on our server once it is idle again: a capture run leaves RocksDB
    flushing and compacting for seconds, which would be charged to the next load point. Adds
    the server's CPU seconds during the load and the share of them spent in the embedding
    model (`embedding_share`, from the server's own /metrics)."""
    srv.wait_idle()
    cpu, model = srv.cpu_seconds(), srv.embedding_cpu_seconds()
    result = harness.load(srv.target, op, callers, plan, query, offset)
    cpu, model = srv.cpu_seconds() - cpu, srv.embedding_cpu_seconds() - model
    return {**result, "server_cpu_seconds": cpu, "embedding_share": model / cpu if cpu else 0.0}


def suggest_texts(plan: Plan) -> list[str]:
    """The very query texts a Suggest load point sends (`service_load.build_requests`: query 0
    onwards, in order)."""
    return [work.query_text(j) for j in range(plan.max_requests)]


def capture_like_texts() -> list[str]:
    """Texts of about the capture loads' length (their intents carry ids past 10,000,000):
    queries 100,000 onwards, about 20 tokens (the Suggest load's own queries, about 17)."""
    return [work.query_text(j) for j in range(100_000, 100_000 + 4000)]


def model_texts_per_second(plan: Plan, texts: list[str]) -> float:
    """The default model alone, in-process, one text per call on `texts` in order: the best
    of 1 thread, one per core and 8 threads."""
    from pml_server.embedding.minilm import MiniLMEmbedder

    model = MiniLMEmbedder()
    model.embed(texts[:8])  # warm-up (the model keeps nothing of a text)
    best = 0.0
    for threads in sorted({1, os.cpu_count() or 1, 8}):
        done = [0] * threads
        deadline = time.perf_counter() + plan.seconds

        def worker(
            n: int, threads: int = threads, done: list[int] = done, deadline: float = deadline
        ) -> None:
            for k in range(n, len(texts), threads):
                if time.perf_counter() >= deadline:
                    return
                model.embed([texts[k]])
                done[n] += 1

        pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        start = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        best = max(best, sum(done) / (time.perf_counter() - start))
    return best


def run(large: bool) -> list[Row]:
    plan = Plan.for_run(large)
    if os.environ.get("PML_BENCH_SCALE_ONLY"):
        size = os.environ.get("PML_BENCH_SCALE_SIZE")
        return run_scale_only(plan, int(size) if size else plan.store_sizes[-1])
    return run_plan(plan)


def run_scale_only(plan: Plan, big: int) -> list[Row]:
    """Only the scale measurement at a store of `big` intents (the 1M run of --large, which
    would not fit beside the rest): the null servicer's Suggest sweep, the empty store's
    startup and memory, then the big store's startup, memory per intent and Suggest sweep with
    client vectors. Skipped: the smaller store, capture, the hashing embedder, durability, the
    model and the canned ceiling (run them without PML_BENCH_SCALE_ONLY)."""
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        root = Path(tmp)
        with harness.server("null") as null_server:
            null = _suggest_sweep(null_server, plan, "vector")
        with harness.server("serve", str(root / "empty"), "minilm", "fast") as empty:
            empty_startup, empty_rss = empty.startup_seconds, empty.rss_bytes()
        vec_big, fill_big = harness.filled_store(plan, root, big, "minilm", vectors=True)
        with harness.server("serve", str(vec_big), "minilm", "fast") as srv:
            big_startup, big_rss = srv.startup_seconds, srv.rss_bytes()
            ours_big = _suggest_sweep(srv, plan, "vector")
    rows = _suggest_rows(f"client vectors, {big} intents", ours_big, null)
    return rows + _scale_rows(
        big, big_startup, empty_startup, big_rss, empty_rss, None, fill_big / big
    )


def run_plan(plan: Plan) -> list[Row]:
    rows: list[Row] = []
    offsets = _Offsets()
    mid = 8 if 8 in plan.concurrency else plan.concurrency[-1]
    small, big = plan.store_sizes
    phase = harness.phase
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        root = Path(tmp)
        # (a) the null servicer: the gRPC ceiling for every call shape
        with phase("null servicer"), harness.server("null") as null_server:
            null = _suggest_sweep(null_server, plan, "vector")
            null_record = harness.load(null_server.target, "record", mid, plan, "vector", 0)
            null_stream = harness.load(null_server.target, "stream", mid, plan, "vector", 0)

        # empty store: the startup and memory baseline
        with (
            phase("empty store"),
            harness.server("serve", str(root / "empty"), "minilm", "fast") as empty,
        ):
            empty_startup, empty_rss = empty.startup_seconds, empty.rss_bytes()

        # client vectors on the model's store (the model is loaded but never called)
        with phase(f"fill {small}"):
            vec_small, fill_small = harness.filled_store(plan, root, small, "minilm", vectors=True)
        with (
            phase(f"client vectors and MiniLM, {small}"),
            harness.server("serve", str(vec_small), "minilm", "fast") as srv,
        ):
            ours = _suggest_sweep(srv, plan, "vector")
            rows += _suggest_rows(f"client vectors, {small} intents", ours, null)
            record_vec = _settled_load(srv, "record", mid, plan, "vector", offsets.take(plan))
            stream_vec = _settled_load(srv, "stream", mid, plan, "vector", offsets.take(plan))
            if plan.with_model:
                # the model alone right before and right after, the better kept: on a shared
                # machine a baseline timed minutes away measures another machine
                srv.wait_idle()
                suggest_rate = model_texts_per_second(plan, suggest_texts(plan))
                model_suggest = _settled_load(srv, "suggest", mid, plan, "text")
                suggest_rate = max(suggest_rate, model_texts_per_second(plan, suggest_texts(plan)))
                model_record = _settled_load(srv, "record", mid, plan, "text", offsets.take(plan))
                model_stream = _settled_load(srv, "stream", mid, plan, "text", offsets.take(plan))
        vector_suggest_small = ours
        if plan.with_model:
            # what any Suggest with the model can reach on this harness: a servicer that only
            # embeds the query, timed right after ours
            with phase("embed-only servicer"), harness.server("embed-only") as embed_only:
                embed_only_suggest = harness.load(embed_only.target, "suggest", mid, plan, "text")
        # our API layer over an engine whose answer is precomputed: what is left for the engine
        with phase("canned"), harness.server("canned", str(vec_small)) as srv:
            canned = _suggest_sweep(srv, plan, "vector")
        rows += _canned_rows(canned, null, ours)
        # what the streaming target can reach on this harness: a servicer doing no work
        rows.append(
            Row(
                SUITE,
                f"streaming vs unary, null servicer ({mid} streams vs {mid} callers)",
                null_stream["qps"],
                "exec/s",
                null_record["qps"],
                "null servicer, unary",
            )
        )
        rows += _capture_rows(
            "client vectors", record_vec, stream_vec, null_record, null_stream, mid
        )

        # the hashing embedder: the server embeds, cheaply
        with phase(f"fill hashing {small}"):
            hashed, _ = harness.filled_store(plan, root, small, "hashing", vectors=False)
        with (
            phase("hashing"),
            harness.server("serve", str(hashed), "hashing", "fast") as srv,
        ):
            ours = _suggest_sweep(srv, plan, "text")
            rows += _suggest_rows(f"hashing embedder, {small} intents", ours, null)
            record_fast = _settled_load(srv, "record", mid, plan, "text", offsets.take(plan))
            stream_fast = _settled_load(srv, "stream", mid, plan, "text", offsets.take(plan))
        rows += _capture_rows("hashing", record_fast, stream_fast, null_record, null_stream, mid)
        rows.append(_share_row(f"unary capture, hashing, {mid} callers", record_fast))
        rows.append(_share_row(f"stream capture, hashing, {mid} streams", stream_fast))
        with (
            phase("hashing, sync"),
            harness.server("serve", str(hashed), "hashing", "sync") as srv,
        ):
            record_sync = _settled_load(srv, "record", mid, plan, "text", offsets.take(plan))
            stream_sync = _settled_load(srv, "stream", mid, plan, "text", offsets.take(plan))
        rows += _durability_rows(record_sync, record_fast, stream_sync, stream_fast, mid)

        # the default model, against the model alone
        if plan.with_model:
            with phase("model alone"):
                capture_rate = model_texts_per_second(plan, capture_like_texts())
            rows += _model_rows(
                model_suggest, model_record, model_stream, suggest_rate, capture_rate, mid
            )
            rows += _embed_only_rows(embed_only_suggest, model_suggest, suggest_rate, mid)

        # scale: the big store
        with phase(f"fill {big}"):
            vec_big, fill_big = harness.filled_store(plan, root, big, "minilm", vectors=True)
        with (
            phase(f"client vectors, {big}"),
            harness.server("serve", str(vec_big), "minilm", "fast") as srv,
        ):
            big_startup, big_rss = srv.startup_seconds, srv.rss_bytes()
            ours_big = _suggest_sweep(srv, plan, "vector")
        rows += _suggest_rows(f"client vectors, {big} intents", ours_big, null)
        rows += _scale_rows(
            big, big_startup, empty_startup, big_rss, empty_rss, fill_small / small, fill_big / big
        )
        rows.append(
            Row(
                SUITE,
                f"Suggest QPS at {big} vs {small} intents, {mid} callers",
                ours_big[mid]["qps"],
                "req/s",
                vector_suggest_small[mid]["qps"],
                f"{small} intents",
            )
        )
    return rows


def _canned_rows(
    canned: dict[int, dict[str, float]],
    null: dict[int, dict[str, float]],
    ours: dict[int, dict[str, float]],
) -> list[Row]:
    rows = []
    for c, result in canned.items():
        rows.append(
            Row(
                SUITE,
                f"Suggest QPS, API layer alone (answer precomputed), {c} callers",
                result["qps"],
                "req/s",
                null[c]["qps"],
                f"null servicer, {c} callers",
                extra={"p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"]},
            )
        )
        rows.append(
            Row(
                SUITE,
                f"Suggest QPS, client vectors vs API layer alone, {c} callers",
                ours[c]["qps"],
                "req/s",
                result["qps"],
                "API layer alone (answer precomputed)",
            )
        )
    return rows


def _capture_rows(
    label: str,
    record: dict[str, float],
    stream: dict[str, float],
    null_record: dict[str, float],
    null_stream: dict[str, float],
    callers: int,
) -> list[Row]:
    return [
        Row(
            SUITE,
            f"capture/s unary RecordExecution, {label}, {callers} callers",
            record["qps"],
            "exec/s",
            null_record["qps"],
            "null servicer, unary",
            extra={"p50_ms": record["p50_ms"], "p99_ms": record["p99_ms"]},
        ),
        Row(
            SUITE,
            f"capture/s StreamTraces, {label}, {callers} streams",
            stream["qps"],
            "exec/s",
            null_stream["qps"],
            "null servicer, stream",
        ),
        Row(
            SUITE,
            f"streaming vs unary capture, {label}",
            stream["qps"],
            "exec/s",
            record["qps"],
            "unary RecordExecution",
            # No target: the benchmark issue's 3x is restated by issue 19 against the null
            # servicer's own streaming rate (the api suite's client-vector row).
        ),
    ]


def _durability_rows(
    record_sync: dict[str, float],
    record_fast: dict[str, float],
    stream_sync: dict[str, float],
    stream_fast: dict[str, float],
    callers: int,
) -> list[Row]:
    return [
        Row(
            SUITE,
            f"sync capture/s, unary, hashing, {callers} callers",
            record_sync["qps"],
            "exec/s",
            record_fast["qps"],
            "fast (WAL, no fsync)",
        ),
        Row(
            SUITE,
            f"sync capture/s, stream, hashing, {callers} streams",
            stream_sync["qps"],
            "exec/s",
            stream_fast["qps"],
            "fast (WAL, no fsync)",
        ),
    ]


def _model_rows(
    suggest: dict[str, float],
    record: dict[str, float],
    stream: dict[str, float],
    suggest_rate: float,
    capture_rate: float,
    callers: int,
) -> list[Row]:
    """Each MiniLM row against the model alone on texts like its own: the Suggest row on the
    load's very queries (timed right before and after it, the better kept), the capture rows
    on texts of their intents' length."""
    base = "MiniLM alone in-process, 1 text/call"
    rows = []
    for name, label, result, rate, texts in (
        (
            f"Suggest QPS, MiniLM, {callers} callers",
            f"Suggest, MiniLM, {callers} callers",
            suggest,
            suggest_rate,
            "the same queries, timed before and after",
        ),
        (
            f"capture/s unary, MiniLM, {callers} callers",
            f"unary capture, MiniLM, {callers} callers",
            record,
            capture_rate,
            "intent-length texts",
        ),
        (
            f"capture/s stream, MiniLM, {callers} streams",
            f"stream capture, MiniLM, {callers} streams",
            stream,
            capture_rate,
            "intent-length texts",
        ),
    ):
        extra = {"p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"]}
        rows.append(
            Row(SUITE, name, result["qps"], "req/s", rate, f"{base}, {texts}", 0.8, extra=extra)
        )
        rows.append(_share_row(label, result))
    rows.append(_outside_model_row(f"Suggest, MiniLM, {callers} callers", suggest))
    return rows


def _embed_only_rows(
    embed_only: dict[str, float], ours: dict[str, float], suggest_rate: float, callers: int
) -> list[Row]:
    """The MiniLM Suggest row's ceiling, measured: gRPC, protobuf, the load client and the
    model, with no API layer and no engine (`service_server.EmbedOnlyServicer`), against the
    model alone on the same queries; and our Suggest against it."""
    return [
        Row(
            SUITE,
            f"Suggest QPS, servicer that only embeds the query (MiniLM), {callers} callers",
            embed_only["qps"],
            "req/s",
            suggest_rate,
            "MiniLM alone in-process, 1 text/call, the same queries",
        ),
        Row(
            SUITE,
            f"Suggest QPS, MiniLM, vs a servicer that only embeds the query, {callers} callers",
            ours["qps"],
            "req/s",
            embed_only["qps"],
            "servicer that only embeds the query (MiniLM)",
        ),
    ]


def _outside_model_row(label: str, result: dict[str, float]) -> Row:
    """What bounds a MiniLM row against the model alone once both cores are busy: the
    server's CPU per request outside the model, over the model's own CPU per request (both
    from the same load point). With the load client's CPU (about 0.45 ms a Suggest) on the
    same cores, the row can reach about 1 / (1 + this ratio + the client's): 0.8x the model
    alone needs this ratio under about 0.2, however the work is scheduled."""
    count = result["count"]
    cpu, share = result["server_cpu_seconds"], result["embedding_share"]
    return Row(
        SUITE,
        f"server CPU per request outside the model, {label}",
        1000.0 * cpu * (1.0 - share) / count,
        "ms",
        1000.0 * cpu * share / count,
        "the model's own CPU per request",
        lower_is_better=True,
    )


def _share_row(label: str, result: dict[str, float]) -> Row:
    """Measured, not inferred: the model's CPU seconds (from the server's /metrics) over the
    server's CPU seconds during the load point."""
    extra = {"server_cpu_seconds": result["server_cpu_seconds"]}
    return Row(
        SUITE,
        f"share of server CPU spent embedding, {label}",
        result["embedding_share"],
        "",
        extra=extra,
    )


def _scale_rows(
    size: int,
    startup: float,
    empty_startup: float,
    rss: int,
    empty_rss: int,
    fill_per_intent_small: float | None,  # None: no smaller store in this run
    fill_per_intent_big: float,
) -> list[Row]:
    per_intent = (rss - empty_rss) / size
    return [
        Row(
            SUITE,
            f"startup to SERVING, {size} intents",
            startup,
            "s",
            empty_startup,
            "empty store",
            lower_is_better=True,
        ),
        Row(
            SUITE,
            f"resident memory per intent, {size} intents",
            per_intent,
            "bytes",
            work.DIM * 4,
            "the raw float32 vector",
            lower_is_better=True,
            extra={"rss_bytes": rss, "empty_rss_bytes": empty_rss},
        ),
        Row(
            SUITE,
            f"in-process fill time per intent, {size} intents",
            fill_per_intent_big * 1e6,
            "us",
            None if fill_per_intent_small is None else fill_per_intent_small * 1e6,
            "smaller store" if fill_per_intent_small is not None else "",
            lower_is_better=True,
        ),
    ]
