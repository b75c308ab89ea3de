"""MeteredEmbedder: the model's runs, texts and time, exact under concurrency, and what the
server exports of them on /metrics."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Sequence

import numpy as np
import pytest

from pml_server.client import PmlClient, make_record
from pml_server.domain.vectors import Matrix
from pml_server.embedding import CachedEmbedder, MeteredEmbedder, make_embedder
from tests.conftest import StartServer


class BusyFake:
    """A 'model' that burns a little CPU per text, so its CPU time is measurable."""

    model_id = "fake"
    family = "fake"
    dim = 4

    def embed(self, texts: Sequence[str]) -> Matrix:
        deadline = time.thread_time() + 0.001 * len(texts)
        while time.thread_time() < deadline:
            pass
        return np.ones((len(texts), 4), dtype=np.float32)


def test_counts_are_exact_under_concurrent_callers() -> None:
    metered = MeteredEmbedder(BusyFake())

    def worker(n: int) -> None:
        for j in range(25):
            metered.embed([f"{n}-{j}-a", f"{n}-{j}-b", f"{n}-{j}-c"][: 1 + j % 3])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    usage = metered.usage()
    assert usage.runs == 8 * 25
    assert usage.texts == 8 * sum(1 + j % 3 for j in range(25))
    # each text burns at least 1 ms of the calling thread's CPU inside the model
    assert usage.cpu_seconds >= usage.texts * 0.001
    assert usage.seconds >= usage.cpu_seconds * 0.5


def test_cache_hits_do_not_count_as_model_work() -> None:
    embedder = make_embedder("hashing")
    embedder.embed(["read a json file"])
    embedder.embed(["read a json file", "parse the csv"])
    usage = embedder.usage()
    assert (usage.runs, usage.texts) == (2, 2)  # the repeated text came from the cache


def test_an_unmetered_embedder_reports_zero_usage() -> None:
    assert CachedEmbedder(BusyFake()).usage().runs == 0


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from /metrics")


def test_metrics_export_the_model_usage(start: StartServer) -> None:
    server = start(metrics_port=0)
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        before = reply.read().decode()
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        client.record(
            make_record("Read the invoice file", "await mcp.read_file()", tools=["read_file"])
        )
        client.suggest("open the quarterly invoice")
    with urllib.request.urlopen(url, timeout=5) as reply:
        after = reply.read().decode()
    assert (
        _metric(after, "pml_embedding_texts_total") - _metric(before, "pml_embedding_texts_total")
        == 2
    )
    assert _metric(after, "pml_embedding_runs_total") > _metric(before, "pml_embedding_runs_total")
    assert _metric(after, "pml_embedding_cpu_seconds_total") > _metric(
        before, "pml_embedding_cpu_seconds_total"
    )


@pytest.mark.model
def test_cpu_of_the_models_helper_threads_is_counted() -> None:
    """MiniLM spreads a batch over two threads: the meter takes the CPU of both, as the model
    reports it, not only the calling thread's."""
    from pml_server.embedding.minilm import MiniLMEmbedder

    model = MiniLMEmbedder(workers=2)
    metered = MeteredEmbedder(model)
    texts = [f"Read the JSON file number {i} and parse it into rows" for i in range(8)]
    metered.embed(texts)
    reported = model.last_call_cpu_seconds()
    assert reported > 0.0
    assert metered.usage().cpu_seconds == reported
    assert metered.usage().texts == 8
