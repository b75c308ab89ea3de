"""Prometheus metrics, one registry per server so several servers in one process never clash."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pml_server import __version__
from pml_server.api.http_deadline import ServedInThread, listener_config, listening_socket
from pml_server.backup import BackupStatus
from pml_server.domain.model import EmbeddingUsage
from pml_server.replication import FollowerLag

# Scrapes answered at once; more are answered 503 (a connection past
# `http_deadline.MAX_OPEN_CONNECTIONS` is closed).
_MAX_SCRAPES = 16


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "pml_requests",
            "RPCs finished, by method and status code",
            ["method", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pml_request_seconds",
            "RPC latency in seconds, by method",
            ["method"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
        )
        self.captures = Counter(
            "pml_captures",
            "Executions captured, by outcome (saved, counted, rejected)",
            ["outcome"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "pml_rejections",
            "Requests refused, by reason (status code name)",
            ["reason"],
            registry=self.registry,
        )
        self.otlp_spans = Counter(
            "pml_otlp_spans",
            "OTLP spans, by result (mapped into executions, ignored, rejected; held for their "
            "run's root span, then expired or overflow)",
            ["result"],
            registry=self.registry,
        )
        self.otlp_http = Counter(
            "pml_otlp_http_requests",
            "OTLP/HTTP requests answered, by HTTP status (uvicorn's own 503 past its connection "
            "limit not counted)",
            ["status"],
            registry=self.registry,
        )
        # docs/operations.md, "Metrics and alerts": two versions serving one store.
        Info("pml_version", "The running pml version", registry=self.registry).info(
            {"version": __version__}
        )
        self._http: ServedInThread | None = None

    def watch_embedding(self, usage: Callable[[], EmbeddingUsage]) -> None:
        """Export the embedding model's totals, read from `usage` at each scrape."""
        self.registry.register(_EmbeddingCollector(usage))

    def watch_follower(self, lag: Callable[[], FollowerLag | None]) -> None:
        """Export how far this replica's indexes trail the shared store's op log."""
        self.registry.register(_FollowerCollector(lag))

    def watch_backups(self, status: Callable[[], BackupStatus | None]) -> None:
        """Export the backups taken and failed, and when the last one succeeded."""
        self.registry.register(_BackupCollector(status))

    def watch_fairness(self, pauses: Callable[[], tuple[int, float]]) -> None:
        """Export how often, and how long, long calls gave way to lighter tenants."""
        self.registry.register(_FairnessCollector(pauses))

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Expose /metrics on `addr:port` (0 picks a free port); returns the bound port. Served
        as pml's other HTTP listeners are (`http_deadline`): prometheus_client's own server
        took a thread and a descriptor for each connection, with no deadline and no bound, so
        1,000 connections that sent half a request line held every descriptor of `pml serve`
        (docs/operations.md, Metrics and alerts)."""
        sock = listening_socket(addr.strip("[]"), port)
        config = listener_config(
            make_asgi_app(self.registry),
            lifespan="off",
            access_log=False,
            limit_concurrency=_MAX_SCRAPES,
        )
        self._http = ServedInThread(config, sock, "pml-metrics")
        self._http.start()
        return int(sock.getsockname()[1])

    def close(self) -> None:
        if self._http is not None:
            self._http.stop()
            self._http = None


class _EmbeddingCollector(Collector):
    """The model's own counters (`EmbeddingUsage`), read when /metrics is scraped: they are
    kept by the embedder, so there is nothing to update on the hot path."""

    def __init__(self, usage: Callable[[], EmbeddingUsage]) -> None:
        self._usage = usage

    def collect(self) -> Iterator[CounterMetricFamily]:
        u = self._usage()
        for name, text, value in (
            ("pml_embedding_runs", "Embedding model calls (a batch of texts is one)", u.runs),
            ("pml_embedding_texts", "Texts embedded by the model (cache hits excluded)", u.texts),
            ("pml_embedding_cpu_seconds", "CPU seconds spent in the model", u.cpu_seconds),
            ("pml_embedding_seconds", "Wall seconds spent in the model", u.seconds),
        ):
            yield CounterMetricFamily(name, text, value=value)


class _FairnessCollector(Collector):
    """`api.fairness`'s pause totals, read at each scrape."""

    def __init__(self, pauses: Callable[[], tuple[int, float]]) -> None:
        self._pauses = pauses

    def collect(self) -> Iterator[CounterMetricFamily]:
        count, seconds = self._pauses()
        yield CounterMetricFamily(
            "pml_fairness_pauses", "Long calls paused for a lighter tenant's call", value=count
        )
        yield CounterMetricFamily(
            "pml_fairness_paused_seconds", "Seconds long calls spent paused", value=seconds
        )


class _BackupCollector(Collector):
    """The backup job's counts (with --backup-dir), read at each scrape."""

    def __init__(self, status: Callable[[], BackupStatus | None]) -> None:
        self._status = status

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        status = self._status()
        if status is None:
            return
        backups = CounterMetricFamily(
            "pml_backups", "Backups of the store, by result (ok, failed)", labels=["result"]
        )
        backups.add_metric(["ok"], status.taken)
        backups.add_metric(["failed"], status.failed)
        yield backups
        yield CounterMetricFamily(
            "pml_backup_prunes_failed",
            "Backups written whose older backups could not be removed (--backup-keep)",
            value=status.prunes_failed,
        )
        if status.last_success_unix is not None:
            yield GaugeMetricFamily(
                "pml_backup_last_success_timestamp_seconds",
                "When the last whole backup was written (Unix time)",
                value=status.last_success_unix,
            )


class _FollowerCollector(Collector):
    """The op log follower's lag (replicas over a shared store), read at each scrape."""

    def __init__(self, lag: Callable[[], FollowerLag | None]) -> None:
        self._lag = lag

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        lag = self._lag()
        if lag is None:
            return
        seconds = GaugeMetricFamily(
            "pml_follower_lag_seconds",
            "Commit-to-applied delay of recent op log entries, by quantile",
            labels=["quantile"],
        )
        seconds.add_metric(["0.5"], lag.p50)
        seconds.add_metric(["0.99"], lag.p99)
        yield seconds
        yield GaugeMetricFamily(
            "pml_follower_behind_entries", "Op log entries not yet applied", value=lag.behind
        )
        yield CounterMetricFamily(
            "pml_follower_applied_entries", "Op log entries applied", value=lag.applied
        )
        yield CounterMetricFamily(
            "pml_follower_rebuilds",
            "Tenants whose indexes were rebuilt from the store after a gap in the op log",
            value=lag.rebuilds,
        )
        yield CounterMetricFamily(
            "pml_follower_errors",
            "Op log catch-ups that failed (the database unreachable, an entry it cannot read)",
            value=lag.errors,
        )
        yield GaugeMetricFamily(
            "pml_follower_stalled",
            "1 while the follower no longer applies the op log (health is NOT_SERVING)",
            value=int(lag.stalled is not None),
        )
