"""Processes of the service benchmark: a server (`service_server`) started and always stopped
by a context manager, a load client (`service_load`) run to completion, and the measurements
read from outside the server (time to SERVING, resident memory)."""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
# Filled stores are kept between runs (filling 100k intents through the engine takes minutes):
# keyed by a fingerprint of the workload and of the code that writes the store.
CACHE = ROOT / "benches" / ".cache"
_START_TIMEOUT = 600.0  # seconds to SERVING: generous for 1M intents with --large


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Log how long a part of the suite took (stderr), to keep the suite inside its budget."""
    start = time.monotonic()
    try:
        yield
    finally:
        print(f"[service] {name}: {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Plan:
    """How big and how long. `quick` is the smoke test's configuration."""

    store_sizes: tuple[int, ...]
    concurrency: tuple[int, ...]
    seconds: float  # per load point
    max_requests: int  # per load point, whatever the rate
    with_model: bool = True
    cache_stores: bool = True

    @classmethod
    def for_run(cls, large: bool) -> Plan:
        if os.environ.get("PML_BENCH_QUICK"):
            return cls.quick()
        if large:
            return cls((100_000, 1_000_000), (1, 8, 32), 5.0, 20_000)
        return cls((10_000, 100_000), (1, 8, 32), 3.0, 8_000)

    @classmethod
    def quick(cls) -> Plan:
        return cls((200, 400), (2,), 0.5, 300, with_model=False, cache_stores=False)


@dataclass
class ServerProc:
    process: subprocess.Popen[str]
    port: int
    startup_seconds: float  # process start to health SERVING
    metrics_port: int | None = None  # our server's /metrics (`serve` only)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def rss_bytes(self) -> int:
        return rss_bytes(self.process.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid, os.sysconf("SC_CLK_TCK"))

    def embedding_cpu_seconds(self) -> float:
        """CPU seconds the server has spent in its embedding model (from its /metrics)."""
        if self.metrics_port is None:
            raise RuntimeError("this server exports no metrics")
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith("pml_embedding_cpu_seconds_total "):
                    return float(line.split()[1])
        raise RuntimeError("pml_embedding_cpu_seconds_total missing from /metrics")

    def wait_idle(self, timeout: float = 60.0) -> float:
        """Wait until the server has used under 5% of a core for a whole second (work left
        over from the previous load point, such as RocksDB flushing and compacting a burst of
        captures, would otherwise be charged to the next one). Returns the seconds waited."""
        ticks = os.sysconf("SC_CLK_TCK")
        start = time.perf_counter()
        before = cpu_seconds(self.process.pid, ticks)
        while time.perf_counter() - start < timeout:
            time.sleep(1.0)
            now = cpu_seconds(self.process.pid, ticks)
            if now - before < 0.05:
                break
            before = now
        return time.perf_counter() - start


def cpu_seconds(pid: int, ticks: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _wait_serving(port: int, process: subprocess.Popen[str], deadline: float) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode} before SERVING")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.02)
    raise TimeoutError("server did not reach SERVING in time")


def stop_process(process: subprocess.Popen[str], grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds: never leaves a process behind (nor its
    pipes open)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


@contextmanager
def server(*args: str) -> Iterator[ServerProc]:
    """Start `python -m benches.harness.service_server ARGS`, wait for SERVING, stop it on exit."""
    start = time.monotonic()
    process = subprocess.Popen(
        python_module("benches.harness.service_server", *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"server did not report its port (got {line!r})")
        words = line.split()  # PORT <n> [METRICS <m>]
        port = int(words[1])
        metrics_port = int(words[3]) if len(words) > 3 and words[2] == "METRICS" else None
        _wait_serving(port, process, start + _START_TIMEOUT)
        yield ServerProc(process, port, time.monotonic() - start, metrics_port)
    finally:
        stop_process(process)


def populate(data_dir: Path, count: int, embedder: str, vectors: bool) -> float:
    """Fill a store in a child process; returns the seconds it took."""
    start = time.monotonic()
    subprocess.run(
        python_module(
            "benches.harness.service_server",
            "populate",
            str(data_dir),
            str(count),
            embedder,
            "vectors" if vectors else "text",
        ),
        cwd=ROOT,
        check=True,
        # bounded, but by the size: a loaded machine fills about 20k intents a minute (a fixed
        # 30 minutes killed the 1M fill two thirds of the way)
        timeout=1800 + count * 0.01,
    )
    return time.monotonic() - start


def load(
    target: str,
    op: str,
    concurrency: int,
    plan: Plan,
    query: str,
    offset: int = 0,
    module: str = "benches.harness.service_load",
) -> dict[str, float]:
    """Run the load client process against `target` and return its JSON summary."""
    done = subprocess.run(
        python_module(
            module,
            target,
            op,
            str(concurrency),
            str(plan.seconds),
            str(plan.max_requests),
            query,
            str(offset),
        ),
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=plan.seconds + 300,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["count"] == 0:
        raise RuntimeError(f"{op} load made no successful call: {result}; {done.stderr[-2000:]}")
    return result


# Bump when a change to how the engine captures changes what the service bench's stores hold
# (their schema, normalizer and model are fingerprinted anyway).
_STORE_EPOCH = 1


def _fingerprint(count: int, embedder: str, vectors: bool) -> str:
    """What decides the service bench's filled stores: the workload, the fill and the store's
    format (schema, normalizer, the model id every stored vector belongs to, the tables'
    filters), not the capture code's source. Every execution of this workload is its own
    pattern (far below the grouping and duplicate thresholds), and a store of the current
    schema is one the current server must serve whatever version wrote it, so a merge that
    touches capture does not refill 100k intents (minutes). `_STORE_EPOCH` forces a refill;
    so does `rm -rf benches/.cache`."""
    from benches.harness import fill, service_server, service_workload
    from pml_server._core import NORMALIZER_VERSION
    from pml_server.embedding.minilm import _MODEL_IDS
    from pml_server.storage.rocks import BLOOM_BITS_PER_KEY, SCHEMA_VERSION

    digest = hashlib.sha256(f"{count}/{embedder}/{vectors}/epoch {_STORE_EPOCH}".encode())
    # the tables' filters are written with them: a store filled without cannot show them
    digest.update(f"bloom {BLOOM_BITS_PER_KEY}".encode())
    digest.update(inspect.getsource(service_workload).encode())
    digest.update(inspect.getsource(fill).encode())
    digest.update(inspect.getsource(service_server.populate).encode())
    digest.update(inspect.getsource(service_server._record).encode())
    digest.update(f"schema {SCHEMA_VERSION} normalizer {NORMALIZER_VERSION}".encode())
    digest.update(repr(sorted(_MODEL_IDS.items())).encode())
    return digest.hexdigest()[:16]


def store_code_digest(digest: Any) -> None:
    """Feed `digest` with what decides a filled store's bytes: the schema, the normalizer, the
    record formats and the capture rules. Read-side code (engine.py's Suggest, the store's
    access paths, views) may change without refilling a 100k store (minutes); after a change
    to how engine.py captures, delete benches/.cache by hand."""
    from pml_server._core import NORMALIZER_VERSION
    from pml_server.storage.rocks import SCHEMA_VERSION

    digest.update(f"schema {SCHEMA_VERSION} normalizer {NORMALIZER_VERSION}".encode())
    pml = ROOT / "pml_server"
    # minilm.py names the model id stored in every store (a store of another id will not open)
    sources = [pml / "storage" / "keys.py", pml / "embedding" / "minilm.py"]
    sources += sorted(p for p in (pml / "capture").glob("*.py") if p.name != "views.py")
    for source in sources:
        digest.update(source.read_bytes())


def filled_store(
    plan: Plan, scratch: Path, count: int, embedder: str, vectors: bool
) -> tuple[Path, float]:
    """A fresh copy of a store filled with executions 0..count, and the seconds the fill took
    (measured when the store was built; later runs copy the cached store)."""
    kind = f"{embedder}-{'vectors' if vectors else 'text'}-{count}"
    copy = scratch / kind
    if not plan.cache_stores:
        return copy, populate(copy, count, embedder, vectors)
    built = CACHE / f"{kind}-{_fingerprint(count, embedder, vectors)}"
    meta = built / "fill.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{kind}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once: the second waits for the first fill
        _wait_for_other_filler(built / "store", meta)
        if not meta.exists():
            for stale in CACHE.glob(f"{kind}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            seconds = populate(built / "store", count, embedder, vectors)
            meta.write_text(json.dumps({"seconds": seconds}))
    shutil.copytree(built / "store", copy)
    return copy, float(json.loads(meta.read_text())["seconds"])


def _wait_for_other_filler(store: Path, meta: Path, timeout: float = 3600.0) -> None:
    """A store being filled by a process that does not take our lock (RocksDB's own LOCK file
    is held): wait for its fill to finish rather than delete it under its feet."""
    deadline = time.monotonic() + timeout
    while not meta.exists() and (store / "LOCK").exists() and time.monotonic() < deadline:
        with (store / "LOCK").open("r+") as rocks_lock:
            try:
                fcntl.lockf(rocks_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                time.sleep(5)  # held: the filler is still running
                continue
            fcntl.lockf(rocks_lock, fcntl.LOCK_UN)
            return  # not held: an abandoned fill, rebuilt by the caller
