"""Where a default-model capture's CPU goes (issue 19): the real server in this process (MiniLM,
`sync`, fresh store), driven by the api suite's own client code in a subprocess, on the api
suite's workloads (benches/bench_api.py), beside the api suite's baseline (the model alone in
its default configuration, same texts, timed before and after):

    python -m benches.profile.capture_profile [MODE] [N]

MODE is `stream` (one StreamTraces upload), `unary8` (RecordExecution from 8 callers) or
`import` (`pml import` of the first N dev-set executions); N defaults to 300 (import: all).
Prints the rate against the model alone, the server's CPU a capture by thread (RPC, capture
pool, the model's helper threads, the store's writer...), the client's CPU a capture, the
model calls the server made (how many texts each) and the model's
CPU a text inside the server and alone (the CPU of the threads that ran it), and the CPU a
capture of the main phases of `record_many` / `record` (timers wrap functions, so the figures
include a few microseconds of timing each). Rates on a shared machine are noisy; CPU a capture
is what to compare.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benches.harness import devset_workload, model_alone
from benches.profile.suggest_profile import _thread_cpu

_DRIVER = """
import os, sys, time
from benches import bench_api
mode, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
records = bench_api._fresh(bench_api._sample(n), mode)
before = os.times()
if mode == "stream":
    rate = bench_api._stream_rate(target, records)
else:
    rate = bench_api._unary_rate(target, records, 8)
after = os.times()
cpu = (after.user + after.system) - (before.user + before.system)
print(f"RATE {rate} CLIENT_CPU {cpu / n}", flush=True)
"""
BASELINE = "int8, batches of 32 on 2 workers (the default)"


class _Timers:
    """Thread CPU and call counts of wrapped functions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()

    def wrap(self, owner: Any, name: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                with self.lock:
                    self.cpu[name] += time.thread_time() - start
                    self.calls[name] += 1

        setattr(owner, name, timed)


def _model_calls(minilm: Any, calls: list[tuple[int, float]]) -> None:
    """Record (texts, CPU of the threads that ran them) of every MiniLM call."""
    embed: Callable[..., Any] = minilm.MiniLMEmbedder.embed

    def recorded(self: Any, texts: Sequence[str]) -> Any:
        out = embed(self, texts)
        calls.append((len(texts), self.last_call_cpu_seconds()))
        return out

    minilm.MiniLMEmbedder.embed = recorded


def _texts_per_call(calls: list[tuple[int, float]]) -> str:
    sizes = collections.Counter(n for n, _ in calls)
    return ", ".join(f"{n}: {count}" for n, count in sorted(sizes.items()))


def main(argv: list[str]) -> None:
    import pml_server.service._capture as capture
    from pml_server.api.server import start_server
    from pml_server.capture.normalize import normalize
    from pml_server.config import config_of
    from pml_server.embedding import minilm
    from pml_server.service import Engine

    mode = argv[0] if argv else "stream"
    n = (
        int(argv[1])
        if len(argv) > 1
        else (len(devset_workload.executions()) if mode == "import" else 300)
    )
    calls: list[tuple[int, float]] = []
    _model_calls(minilm, calls)
    timers = _Timers()
    for name in ("record", "record_many", "embed_ahead", "_embed_batch", "_prepare"):
        timers.wrap(capture, name)
    for name in ("_capture_one_locked", "apply_staged_adds", "await_durable"):
        timers.wrap(capture, name)
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="pml-capture-profile-") as tmp:
        config = config_of(
            listen="127.0.0.1:0", data_dir=Path(tmp) / "store", embedder="minilm", durability="sync"
        )
        engine = Engine.open(config.engine, normalizer=normalize)
        if not engine.admin.wait_ready(600):
            raise RuntimeError("engine index did not become ready")
        running = start_server(config, engine)
        target = f"127.0.0.1:{running.port}"
        try:
            if mode == "import":
                jsonl = Path(tmp) / "devset.jsonl"
                devset_workload.write_jsonl(jsonl, "imp", n)
                texts = devset_workload.intents(n)
                command = [sys.executable, "-m", "pml_server.cli", "import", "--server", target]
                command.append(str(jsonl))
            else:
                from benches.bench_api import _sample

                texts = [r.intent for r in _sample(n)]
                command = [sys.executable, "-c", _DRIVER, mode, target, str(n)]
            alone = model_alone.configuration(BASELINE, texts)
            calls.clear()
            before = model_alone.rate(alone, len(texts))
            alone_cpu = sum(c for _, c in calls) / max(1, sum(k for k, _ in calls))
            calls.clear()
            timers.cpu.clear()
            timers.calls.clear()
            threads_before, process_before = _thread_cpu(), os.times()
            start = time.perf_counter()
            done = subprocess.run(
                command, cwd=root, capture_output=True, text=True, check=True, timeout=1800
            )
            elapsed = time.perf_counter() - start
            threads_after, process_after = _thread_cpu(), os.times()
            names = {str(t.native_id): t.name for t in threading.enumerate()}
            served = list(calls)
            after = model_alone.rate(alone, len(texts))
        finally:
            running.stop(grace=2.0)
            engine.close()
    if mode == "import":
        rate, client_cpu = (
            len(texts) / elapsed,
            (
                (process_after.children_user + process_after.children_system)
                - (process_before.children_user + process_before.children_system)
            )
            / len(texts),
        )
        client_note = "the whole CLI process, start included"
    else:
        words = done.stdout.split()
        rate, client_cpu = float(words[1]), float(words[3])
        client_note = "the upload only"
    baseline = (before + after) / 2
    server_cpu = (process_after.user + process_after.system) - (
        process_before.user + process_before.system
    )
    print(
        f"{mode}, {len(texts)} dev-set executions: {rate:.1f}/s, model alone {before:.1f} before "
        f"and {after:.1f} after: {rate / baseline:.3f}x"
    )
    print(
        f"server CPU {server_cpu / len(texts) * 1e3:.2f} ms a capture; client CPU "
        f"{client_cpu * 1e3:.2f} ms a capture ({client_note})"
    )
    by_thread: collections.Counter[str] = collections.Counter()
    for key, cpu in threads_after.items():
        used = cpu - threads_before.get(key, 0.0)
        if used > 0:
            by_thread[names.get(key[0], key[1]).rstrip("0123456789_-")] += used
    print(
        "  server threads, CPU ms a capture: "
        + ", ".join(
            f"{name} {cpu / len(texts) * 1e3:.2f}" for name, cpu in by_thread.most_common(8)
        )
    )
    texts_run = sum(k for k, _ in served)
    print(
        f"  model calls {len(served)} for {texts_run} texts; "
        f"texts a call: {_texts_per_call(served)}"
    )
    print(
        f"  model CPU a text: {sum(c for _, c in served) / max(1, texts_run) * 1e3:.2f} ms in "
        f"the server, {alone_cpu * 1e3:.2f} ms alone (the threads that ran it)"
    )
    for name in sorted(timers.cpu):
        print(
            f"  {name:20s} {timers.calls[name]:6d} calls, CPU "
            f"{timers.cpu[name] / len(texts) * 1e3:6.3f} ms a capture"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
