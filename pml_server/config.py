"""Server configuration: one typed object, filled from CLI flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pml_server.ranking import RankingConfig
from pml_server.retention import RetentionConfig

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_DATA_DIR = Path("pml-data")


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to start."""

    listen: str = DEFAULT_LISTEN
    data_dir: Path = DEFAULT_DATA_DIR
    store: str | None = None  # postgresql:// DSN of a shared store (see EngineConfig.store)
    pool_size: int = 8
    max_workers: int = 16
    grace_seconds: float = 10.0
    # ---- API layer (pml_server/api) ----
    # API keys file (hashes only); None: single tenant, loopback-only unless allow_insecure_remote.
    keys_file: Path | None = None
    allow_insecure_remote: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None  # set: mutual TLS, clients must present a cert it signed
    metrics_port: int | None = None  # Prometheus /metrics on 127.0.0.1:PORT when set
    metrics_host: str = "127.0.0.1"
    embedder: str = "minilm"
    durability: str = "sync"
    vector_index: str = "hnsw"
    max_code_bytes: int = 256 * 1024
    max_tool_calls: int = 256
    max_message_bytes: int = 8 * 1024 * 1024
    max_concurrent_rpcs: int = 256
    capture_workers: int = 8
    stream_window: int = 64  # unacknowledged executions per stream before reading pauses
    max_open_executions: int = 1024  # live executions buffered per stream
    # Streams open at once (default: half of max_workers, leaving threads for unary calls), per
    # connection, and how long a stream may stay silent with nothing in flight.
    max_streams: int | None = None
    max_streams_per_connection: int = 4
    stream_idle_seconds: float = 60.0
    # Per-tenant quotas (multi-tenant mode): calls in progress (default: a quarter of the RPC
    # threads) and an optional token bucket (calls/s, burst).
    tenant_max_in_flight: int | None = None
    tenant_rate: float | None = None
    tenant_burst: int | None = None
    keepalive_time_ms: int = 60_000
    keepalive_timeout_ms: int = 20_000
    page_token_secret_file: Path | None = None  # default: <data_dir>/page-token.key
    log_json: bool = True
    # The retention policy, applied by the served engine on its own (see EngineConfig).
    retention_in_background: bool = True
    retention_interval_seconds: float = RetentionConfig().interval_seconds


@dataclass(frozen=True)
class EngineConfig:
    """The engine (capture, store, embeddings, indexes, ranking, retention); see docs/capture.md."""

    data_dir: Path
    # A postgresql:// DSN: the shared store of several replicas (pml_server/storage/postgres);
    # None: the embedded RocksDB store in data_dir.
    store: str | None = None
    pool_size: int = 8  # database connections of this replica (shared store only)
    embedder: str = "minilm"  # "minilm" | "hashing"
    durability: str = "sync"  # "sync": ack after WAL fsync (group commit) | "fast": WAL, no fsync
    max_code_bytes: int = 256 * 1024
    max_tool_calls: int = 256
    vector_index: str = "hnsw"  # "hnsw" (Rust HNSW) | "exact" (numpy brute force)
    # None: the calibrated default of the embedder family (pml_server/capture/dedup.py).
    intent_duplicate_threshold: float | None = None
    capability_group_threshold: float | None = None
    failure_log_size: int = 10_000  # failure log entries kept per tenant
    recent_values_per_param: int = 5
    embedding_cache_size: int = 10_000
    # Apply the retention table to every tenant each retention.interval_seconds: flags and
    # deprioritizes (the ranking reads the marks); deletes only with retention.auto_remove.
    retention_in_background: bool = True
    # Vector index snapshots while running (0: only at open and close); a crash then replays
    # at most this much of the op log instead of rebuilding the HNSW graph.
    snapshot_interval_seconds: float = 300.0
    # Idempotency answers are kept this long (pruned when retention is applied): a retry after
    # that counts again.
    request_id_ttl_days: float = 7.0
    # None: the calibrated defaults of the embedder family (pml_server/ranking/config.py).
    ranking: RankingConfig | None = None
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        if self.embedder not in ("minilm", "hashing"):
            raise ValueError(f"embedder must be minilm or hashing, got {self.embedder!r}")
        if self.durability not in ("sync", "fast"):
            raise ValueError(f"durability must be sync or fast, got {self.durability!r}")
        if self.vector_index not in ("hnsw", "exact"):
            raise ValueError(f"vector_index must be hnsw or exact, got {self.vector_index!r}")
        for name in ("max_code_bytes", "max_tool_calls", "failure_log_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be >= 1")
