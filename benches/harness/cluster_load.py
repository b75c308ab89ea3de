"""Load for `bench_cluster`: callers in processes of their own (a Python client costs about as
much CPU as the server, and one process's GIL would cap the load, not the servers), each
process running threads that call one of the targets in turn for a fixed time."""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    kind: str  # "capture" | "suggest"
    targets: tuple[str, ...]
    threads: int
    seconds: float
    tag: str  # request id prefix (fresh ids per run: no replays)


def _record(w: int, i: int, tag: str) -> object:
    from pml_server.client import make_record

    n = (w * 7919 + i) % 200
    code = f'const d = await mcp.tool_{n}({{path: "{tag}{w}-{i}.json"}}); return d'
    return make_record(
        f"Read JSON file {n % 50} with tool {n}",
        code,
        tools=[f"tool_{n}"],
        request_id=f"{tag}-{w}-{i}",
    )


def _caller(job: Job, w: int, latencies: list[float], errors: list[str]) -> None:
    from pml_server.client import PmlClient, PmlClientError

    target = job.targets[w % len(job.targets)]
    # retries=0: a refused call is counted as an error, not hidden behind the client's retry
    with PmlClient(target, timeout=30, retries=0) as client:
        deadline = time.perf_counter() + job.seconds
        i = 0
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            try:
                if job.kind == "capture":
                    client.record(_record(w, i, job.tag))  # type: ignore[arg-type]
                else:
                    client.suggest(f"Read JSON file {(w * 31 + i) % 50}")
            except PmlClientError as err:
                errors.append(err.code.name)
                continue
            latencies.append(time.perf_counter() - began)
            i += 1


def _process(job: Job, first: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    latencies: list[float] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=_caller, args=(job, first + t, latencies, errors))
        for t in range(job.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put((latencies, errors))


def run_load(job: Job, processes: int) -> tuple[list[float], list[str], float]:
    """(latencies in seconds, error codes, wall seconds) of `processes` x `job.threads` callers."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    procs = [
        context.Process(target=_process, args=(job, p * job.threads, out)) for p in range(processes)
    ]
    began = time.perf_counter()
    for proc in procs:
        proc.start()
    results = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - began
    latencies = [x for lat, _ in results for x in lat]
    errors = [e for _, err in results for e in err]
    return latencies, errors, wall
