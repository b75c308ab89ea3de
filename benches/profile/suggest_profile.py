"""Where a served Suggest's time goes: the real server in this process over a copy of the service
bench's cached store (client vectors), driven by the service bench's load client process, with
each phase of the Suggest path timed in wall and thread CPU time (issue 20's breakdown):

    python -m benches.profile.suggest_profile [SIZE] [CALLERS,...] [SECONDS]

Defaults: 10000 intents, 1,8,32 callers, 3 s a point. The store must be in benches/.cache
(`python -m benches service` fills it). Prints, per load point, the server's CPU per request,
each phase's wall and CPU milliseconds per request, the collector's passes and the view
cache's hits, and the server's threads' CPU per request (the handler threads of grpcio's pool,
its poll thread, RocksDB's and the event engine's: what runs beside the handler). Timers wrap
methods, so the figures include a few microseconds of timing each.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benches.harness import service_harness as harness

_Stats = dict[str, list[float]]


def _thread_cpu() -> dict[tuple[str, str], float]:
    """CPU seconds (user + system) of each of this process's threads, by (thread id, name)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[(tid, name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def _busiest_threads(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], requests: float
) -> list[str]:
    """The threads that used CPU between the two readings, busiest first, in ms a request."""
    used = {key: cpu - before.get(key, 0.0) for key, cpu in after.items()}
    busy = sorted((cpu, key) for key, cpu in used.items() if cpu > 0)
    return [f"{name} {tid}: {cpu / requests * 1e3:.3f}" for cpu, (tid, name) in reversed(busy)]


def _timed(owner: Any, name: str, label: str, stats: _Stats) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            entry = stats.setdefault(label, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - wall
            entry[2] += time.thread_time() - cpu

    setattr(owner, name, timed)


def main(argv: list[str]) -> None:
    import pml_server.api.convert as convert
    import pml_server.api.servicer as servicer
    import pml_server.search.tenant as tenant_index
    import pml_server.service._suggest_core as core_path
    from pml_server.api.server import start_server
    from pml_server.capture.normalize import normalize
    from pml_server.config import config_of
    from pml_server.service import Engine

    size = int(argv[0]) if argv else 10_000
    callers = [int(c) for c in argv[1].split(",")] if len(argv) > 1 else [1, 8, 32]
    seconds = float(argv[2]) if len(argv) > 2 else 3.0
    plan = harness.Plan((size,), tuple(callers), seconds, 8000)
    stats: _Stats = {}
    collections: dict[int, list[float]] = {}
    started = [0.0]

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            entry = collections.setdefault(info["generation"], [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started[0]

    with tempfile.TemporaryDirectory(prefix="pml-profile-") as tmp:
        store, _ = harness.filled_store(plan, Path(tmp), size, "minilm", vectors=True)
        config = config_of(
            listen="127.0.0.1:0", data_dir=store, embedder="minilm", durability="fast"
        )
        engine = Engine.open(config.engine, normalizer=normalize)
        if not engine.admin.wait_ready(600):
            raise RuntimeError("engine index did not become ready")
        _timed(servicer.PmlServicer, "Suggest", "Suggest handler (all)", stats)
        _timed(convert, "suggest_query", "  request -> query", stats)
        _timed(Engine, "suggest", "  engine.suggest", stats)
        _timed(tenant_index.TenantSearchIndex, "rank", "    core ranking call", stats)
        _timed(core_path, "_read_views", "    views read (misses)", stats)
        _timed(convert, "suggest_response", "  answer -> response", stats)
        gc.callbacks.append(on_collection)
        running = start_server(config, engine)
        try:
            target = f"127.0.0.1:{running.port}"
            views = engine._state.views
            time.sleep(1.0)  # SERVING: the server froze what the open loaded
            for count in callers:
                stats.clear()
                collections.clear()
                hits, misses = (views.hits, views.misses) if views is not None else (0, 0)
                cpu, threads = time.process_time(), _thread_cpu()
                result = harness.load(target, "suggest", count, plan, "vector")
                n = result["count"]
                busiest = _busiest_threads(threads, _thread_cpu(), n)
                cpu_ms = (time.process_time() - cpu) / n * 1e3
                print(
                    f"{count} callers: {result['qps']:.0f} req/s, p50 {result['p50_ms']:.2f} ms, "
                    f"server CPU {cpu_ms:.2f} ms a request"
                )
                for label, (calls, wall, thread) in stats.items():
                    print(
                        f"  {label:28s} wall {wall / n * 1e3:6.3f}  CPU {thread / n * 1e3:6.3f} "
                        f"ms a request ({calls / n:.1f} calls)"
                    )
                print(f"  threads' CPU, ms a request: {', '.join(busiest[:8])}")
                passes = {g: (int(c), round(t / n * 1e3, 3)) for g, (c, t) in collections.items()}
                print(f"  collector passes by generation (count, ms a request): {passes}")
                if views is not None:
                    print(
                        f"  view cache: {views.hits - hits} hits, {views.misses - misses} misses,"
                        f" {len(views)} views, {views.used_bytes / 1e6:.1f} MB"
                    )
        finally:
            running.stop(grace=1.0)
            engine.close()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
