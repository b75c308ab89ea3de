"""The configuration tree: every setting once, with its type, default and help. `pml serve`'s
flags are made from these fields (`_flags`), a `--config` TOML file is read against them
(`_toml`), and the server and the engine each take their own part."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pml_server.config._addresses import listen_problem
from pml_server.domain.limits import LIMITS, MIB, Limits
from pml_server.ranking.config import RankingConfig
from pml_server.retention import RetentionConfig

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_DATA_DIR = Path("pml-data")


def setting(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    default_text: str | None = None,
) -> Any:
    """A field of the tree. `flag`: its `pml serve` option (default `--field-name`);
    `default_text`: how `--help` names a default that is computed (or None) at run time."""
    metadata = {"help": help, "flag": flag, "choices": choices, "default_text": default_text}
    return field(default=default, metadata=metadata)


_GRPC_INT_MAX = 2**31 - 1  # what gRPC's integer options hold
# Threads of one pool (RPC, capture). Unbounded, `max_workers = 99999999999999999999` was taken:
# and with it `max_streams` (half of it by default) and a tenant's calls in flight had no bound.
_MAX_THREADS = 1024
# Executions a stream reads ahead of their acknowledgements, each held in memory until captured
# (a record may take MBs): unbounded, a client that sends faster than the server captures grew
# it without limit (docs/api.md, The API: "Streams").
_MAX_STREAM_WINDOW = 4096
# A token bucket's size: past 2**1024 it is no float (a traceback and abort at start), and long
# before that it lets through every call a rate would limit.
_MAX_BURST = 1_000_000_000
# Argument values a pattern keeps per parameter, rewritten with the pattern at each capture:
# unbounded, every distinct value was kept (21 KB a pattern after 1,000 of them, 63 KB after
# 3,000, and growing); an answer shows at most 64 KiB of a pattern anyway.
_MAX_RECENT_VALUES = 1024
# The upper bound of each count that has one; each lower bound is checked beside it
# (docs/configuration.md shows both in the setting's help).
UPPER_BOUNDS: dict[str, int] = {
    "server.max_workers": _MAX_THREADS,
    "server.capture_workers": _MAX_THREADS,
    "server.stream_window": _MAX_STREAM_WINDOW,
    "server.tenant_burst": _MAX_BURST,
    "engine.recent_values_per_param": _MAX_RECENT_VALUES,
}


def _check_upper_bounds(section: str, config: object) -> None:
    """ValueError naming the first count of `section` above its `UPPER_BOUNDS` entry."""
    for key, most in UPPER_BOUNDS.items():
        table, _, name = key.partition(".")
        value = getattr(config, name) if table == section else None
        if value is not None and value > most:
            raise ValueError(f"{key} must be at most {most}")


@dataclass(frozen=True)
class ServerConfig:
    """The gRPC server (`pml_server/api`): listening, keys, TLS, quotas, streams, metrics, logs."""

    listen: str = setting(DEFAULT_LISTEN, "host:port to bind (port 0: any free port)")
    keys_file: Path | None = setting(
        None, "API keys file (see `pml keys add`); none: single tenant, loopback only"
    )
    allow_insecure_remote: bool = setting(False, "allow a non-loopback listen without keys")
    tls_cert: Path | None = setting(None, "server certificate (PEM)")
    tls_key: Path | None = setting(None, "server private key (PEM)")
    tls_client_ca: Path | None = setting(
        None, "CA for client certificates: enables mutual TLS (needs tls_cert and tls_key)"
    )
    page_token_secret_file: Path | None = setting(
        None,
        "key that signs page tokens: 32 random bytes, created (mode 0600) when missing, a "
        "file of another size refused; replicas of one shared store must use the same file, "
        "or a page token from one is refused by another",
        default_text="<data-dir>/page-token.key",
    )
    metrics_port: int | None = setting(None, "serve Prometheus /metrics on this port")
    metrics_host: str = setting("127.0.0.1", "address for /metrics")
    max_message_bytes: int = setting(
        8 * 1024 * 1024, "largest gRPC message received (larger: RESOURCE_EXHAUSTED)"
    )
    max_concurrent_rpcs: int = setting(256, "calls in progress before new ones are refused")
    max_workers: int = setting(16, f"RPC threads (at most {_MAX_THREADS})")
    # 4, not 8: on 2 cores, 8 streams' batches captured at once mostly contended for the GIL
    # and the engine's locks (StreamTraces with client vectors, 8 streams: about 370/s and
    # 2.2 ms of server CPU a capture with 4 or 2, 280/s and 2.7 ms with 8; docs/capture.md).
    capture_workers: int = setting(4, f"threads that run stream captures (at most {_MAX_THREADS})")
    stream_window: int = setting(
        64,
        "unacknowledged executions per stream before the server stops reading (at most "
        f"{_MAX_STREAM_WINDOW})",
    )
    # A settable entry of the one table of limits (`pml_server.domain.limits`).
    max_open_executions: int = setting(
        LIMITS.open_executions.bound, "live executions one stream may hold open (started)"
    )
    max_streams: int | None = setting(
        None, "streams open at once, server-wide", default_text="half of max_workers"
    )
    max_streams_per_connection: int = setting(4, "streams open per connection")
    stream_idle_seconds: float = setting(
        60.0, "a stream silent this long with nothing in flight is closed"
    )
    # docs/capture.md, "Runs split over several Exports".
    otlp_http_listen: str | None = setting(
        None,
        "also take OTLP/HTTP traces (POST /v1/traces, protobuf or JSON) on this host:port, "
        "e.g. 127.0.0.1:4318; none: OTLP over the gRPC port only",
    )
    otlp_pending_spans: int = setting(
        100_000, "OTLP spans held per tenant while their run's root span has not arrived"
    )
    otlp_pending_seconds: float = setting(
        600.0, "how long held OTLP spans wait for their run's root span (then: expired)"
    )
    otlp_settle_seconds: float = setting(
        5.0,
        "how long an invoke_agent span that arrived with no tool call is held for calls "
        "exported after it (an exporter sending spans over concurrent requests)",
    )
    tenant_max_in_flight: int | None = setting(
        None,
        "calls in progress per tenant",
        default_text="a quarter of max_workers with a keys file, else all",
    )
    tenant_rate: float | None = setting(None, "calls per second per tenant (token bucket)")
    tenant_burst: int | None = setting(
        None, f"token bucket size (at most {_MAX_BURST})", default_text="the rate"
    )
    keepalive_time_ms: int = setting(60_000, "ping an idle connection after this long")
    keepalive_timeout_ms: int = setting(20_000, "a ping unanswered this long closes it")
    grace_seconds: float = setting(10.0, "how long SIGTERM waits for in-flight calls")
    log_format: str = setting("json", "log line format on stderr", choices=("json", "text"))
    log_level: str = setting("info", "log level", choices=("debug", "info", "warning", "error"))

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_concurrent_rpcs", "max_workers", "capture_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"server.{name} must be >= 1")
        _check_upper_bounds("server", self)
        for name in ("stream_window", "max_streams_per_connection", "max_open_executions"):
            if getattr(self, name) < 1:
                raise ValueError(f"server.{name} must be >= 1")
        # gRPC takes these as C ints: a larger one was an OverflowError traceback at start.
        for name in ("max_message_bytes", "max_concurrent_rpcs"):
            if getattr(self, name) > _GRPC_INT_MAX:
                raise ValueError(f"server.{name} must be at most {_GRPC_INT_MAX}")
        for name in ("keepalive_time_ms", "keepalive_timeout_ms"):
            if not 1 <= getattr(self, name) <= _GRPC_INT_MAX:
                raise ValueError(f"server.{name} must be 1..{_GRPC_INT_MAX}")
        # NaN or a negative value was taken: `grace_seconds = nan` made SIGTERM fail before the
        # engine was closed, `stream_idle_seconds = -1` closed every stream 50 ms after it went
        # quiet.
        if not (math.isfinite(self.grace_seconds) and self.grace_seconds >= 0):
            raise ValueError("server.grace_seconds must be a finite number >= 0")
        for name in ("stream_idle_seconds", "otlp_pending_seconds", "otlp_settle_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"server.{name} must be a finite number > 0")
        # Refused here, naming the setting: a metrics port past 65535 cannot be bound, a burst
        # of 0 would refuse every call for ever, a NaN or negative rate has no meaning, and 0
        # for the limits below would read as "unset" further on.
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"server.metrics_port: port {self.metrics_port} is not 0..65535")
        rate = self.tenant_rate
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError("server.tenant_rate must be a finite number > 0")
        for name in ("tenant_burst", "tenant_max_in_flight", "max_streams"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"server.{name} must be >= 1")
        if self.otlp_pending_spans < 0:
            raise ValueError("server.otlp_pending_spans must be >= 0")
        for name in ("listen", "otlp_http_listen"):
            value = getattr(self, name)
            if value is not None and (problem := listen_problem(value)) is not None:
                raise ValueError(f"server.{name}: {problem}")


@dataclass(frozen=True)
class EngineConfig:
    """The engine (capture, store, embeddings, indexes, ranking, retention); docs/capture.md."""

    data_dir: Path = setting(DEFAULT_DATA_DIR, "RocksDB directory (and this replica's local files)")
    store: str | None = setting(
        None,
        "postgresql://host:port/db: share one PostgreSQL database with other replicas; put a "
        "password in PML_STORE, PGPASSWORD or ~/.pgpass, never here (a command line and a "
        "config file are read by others)",
        default_text="$PML_STORE, else the embedded RocksDB in data_dir",
    )
    pool_size: int = setting(8, "database connections of this replica (with store)")
    view_cache_size: int = setting(
        10_000,
        "patterns whose views (record, counters, intents) a replica keeps in memory for "
        "Suggest, and at most 128 MiB of them (with store; 0: read them from the database "
        "every time)",
    )
    embedder: str = setting(
        "minilm",
        "intent embedder: the real MiniLM model, or the fast hashing one",
        choices=("minilm", "hashing"),
    )
    cross_lingual: str = setting(
        "use",
        "cross-lingual companion of the minilm embedder: a request that is not in English is "
        "compared with every intent in this multilingual model's space (use: Universal "
        "Sentence Encoder multilingual, read through a bridge to MiniLM's geometry; e5: "
        "multilingual-e5-small; none: off; ignored with the hashing embedder)",
        choices=("use", "e5", "none"),
    )
    durability: str = setting(
        "sync",
        "sync: acknowledged after the WAL fsync (group commit); fast: WAL without fsync",
        choices=("sync", "fast"),
    )
    vector_index: str = setting(
        "hnsw",
        "intent search: the Rust HNSW index, walked (hnsw) or scanned whole (exact: exact "
        "recall, linear cost)",
        choices=("hnsw", "exact"),
    )
    # The two settable entries of the one table of limits (`pml_server.domain.limits`).
    max_code_bytes: int = setting(
        LIMITS.code.bound,
        f"largest code text taken (at most {LIMITS.code_ceiling.bound}: GetPattern answers a "
        "pattern's code and its template whole, within the 4 MiB a default gRPC client receives)",
    )
    max_tool_calls: int = setting(
        LIMITS.tool_calls.bound,
        f"most tool calls per execution (at most {LIMITS.tool_calls_ceiling.bound}: "
        "GetCapability answers a capability's tools whole, within the 4 MiB a default gRPC "
        "client receives)",
    )
    intent_duplicate_threshold: float | None = setting(
        None,
        "cosine above which a new intent of a pattern is a duplicate (not stored)",
        default_text="the embedder's calibrated value",
    )
    capability_group_threshold: float | None = setting(
        None,
        "cosine above which a new pattern joins a capability of the same tools",
        default_text="the embedder's calibrated value",
    )
    failure_log_size: int = setting(10_000, "failure log entries kept per tenant")
    max_sessions: int = setting(
        LIMITS.sessions.bound,
        "agent sessions whose last step is kept per tenant (docs/ranking.md, Sessions); the "
        "least recently used beyond it are dropped",
    )
    session_idle_seconds: float = setting(
        3600.0, "a session idle this long is over: its next step follows nothing"
    )
    recent_values_per_param: int = setting(
        5, f"recent argument values kept per parameter (at most {_MAX_RECENT_VALUES})"
    )
    embedding_cache_size: int = setting(10_000, "embedded texts cached (per model)")
    embedding_cache_bytes: int = setting(
        32 * MIB,
        "bytes the embedded texts cached hold at most (per model: the texts, their vectors and "
        "the entries; a text of 4,096 characters takes 6 to 18 KB); the cache keeps at most "
        "embedding_cache_size texts within this",
    )
    retention_in_background: bool = setting(
        True,
        "apply the retention policy (flag, deprioritize; delete only with auto_remove) to every "
        "tenant every retention.interval_seconds",
        flag="--retention",
    )
    snapshot_interval_seconds: float = setting(
        300.0,
        "vector index snapshots while running (0: only at open and close); a crash then "
        "replays at most this much of the op log instead of rebuilding the HNSW graph",
    )
    request_id_ttl_days: float = setting(
        7.0, "idempotency answers kept this long (a retry after that counts again)"
    )
    backup_dir: Path | None = setting(
        None,
        "take backups of the embedded store into this directory while serving: one on "
        "SIGUSR2, and every backup_interval_seconds; each backup's directory is a data "
        "directory to serve",
        default_text="none: no backups",
    )
    backup_interval_seconds: float = setting(
        0.0, "with backup_dir: a backup this often (0: only on SIGUSR2)"
    )
    backup_keep: int = setting(
        7, "with backup_dir: this store's newest backups kept, its older ones deleted"
    )
    # None: the calibrated defaults of the embedder family (pml_server/ranking/config.py); a
    # `[engine.ranking]` table replaces some of them.
    ranking: RankingConfig | None = None
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        if self.embedder not in ("minilm", "hashing"):
            raise ValueError(f"embedder must be minilm or hashing, got {self.embedder!r}")
        if self.cross_lingual not in ("use", "e5", "none"):
            raise ValueError(f"cross_lingual must be use, e5 or none, got {self.cross_lingual!r}")
        if self.durability not in ("sync", "fast"):
            raise ValueError(f"durability must be sync or fast, got {self.durability!r}")
        if self.vector_index not in ("hnsw", "exact"):
            raise ValueError(f"vector_index must be hnsw or exact, got {self.vector_index!r}")
        # NaN or infinity cannot be used later (a session's idle time and the request id TTL
        # are turned into integers), so it is refused here, naming the setting.
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"engine.{f.name} must be a finite number, got {value!r}")
        if self.session_idle_seconds <= 0:
            raise ValueError("engine.session_idle_seconds must be > 0")
        for name in (
            "failure_log_size",
            "pool_size",
            "embedding_cache_size",
            "embedding_cache_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"engine.{name} must be >= 1")
        for name in ("view_cache_size", "recent_values_per_param"):
            if getattr(self, name) < 0:
                raise ValueError(f"engine.{name} must be >= 0")
        _check_upper_bounds("engine", self)
        if self.snapshot_interval_seconds < 0:
            raise ValueError("engine.snapshot_interval_seconds must be >= 0")
        if self.request_id_ttl_days <= 0:
            raise ValueError("engine.request_id_ttl_days must be > 0")
        # A threshold on a cosine: past 1 it never holds, under -1 always (85, meant as 0.85,
        # was taken without a word).
        for name in ("intent_duplicate_threshold", "capability_group_threshold"):
            value = getattr(self, name)
            if value is not None and not -1 <= value <= 1:
                raise ValueError(f"engine.{name} must be a cosine, -1 to 1, got {value:g}")
        # a job's thread waits its interval, and a wait longer than this raises OverflowError
        for name in ("snapshot_interval_seconds", "backup_interval_seconds"):
            if getattr(self, name) > threading.TIMEOUT_MAX:
                raise ValueError(f"engine.{name} must be at most {threading.TIMEOUT_MAX:g}")
        # RocksDB takes UTF-8 paths: bytes that are not UTF-8 (a str with lone surrogates) said
        # "cannot open the store ...: 'utf-8' codec can't encode ... Restore it from a backup"
        for name in ("data_dir", "backup_dir"):
            value = getattr(self, name)
            if value is not None and not str(value).isascii():
                try:
                    str(value).encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(
                        f"engine.{name}: the path {value} holds bytes that are not UTF-8 text; "
                        "the store takes UTF-8 paths"
                    ) from None
        self._check_backups()
        _ = self.limits  # a bad settable limit is refused now, not at the first capture

    def _check_backups(self) -> None:
        if self.backup_keep < 1:
            raise ValueError("engine.backup_keep must be >= 1")
        if self.backup_interval_seconds < 0:
            raise ValueError("engine.backup_interval_seconds must be >= 0")
        if self.backup_dir is None:
            return
        if self.store:
            raise ValueError(
                "engine.backup_dir backs up the embedded store; a shared PostgreSQL store is "
                "backed up with PostgreSQL's own tools (pg_dump, or a base backup)"
            )
        data_dir, backup_dir = (os.path.abspath(p) for p in (self.data_dir, self.backup_dir))
        if os.path.commonpath([data_dir, backup_dir]) == data_dir:
            raise ValueError(
                f"engine.backup_dir ({self.backup_dir}) must be outside data_dir "
                f"({self.data_dir}): a copy of the data directory would carry its backups"
            )

    @property
    def limits(self) -> Limits:
        """The one table of limits with this engine's settable bounds."""
        return LIMITS.with_bounds(
            code=self.max_code_bytes, tool_calls=self.max_tool_calls, sessions=self.max_sessions
        )


@dataclass(frozen=True)
class Config:
    """Everything `pml serve` takes: `[server]` and `[engine]` (with `[engine.ranking]` and
    `[engine.retention]`) of a `--config` file, each field also a flag."""

    server: ServerConfig = field(default_factory=ServerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)


SECTIONS: dict[str, type[ServerConfig] | type[EngineConfig]] = {
    "server": ServerConfig,
    "engine": EngineConfig,
}
_SECTION_OF = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}
assert len(_SECTION_OF) == sum(len(fields(c)) for c in SECTIONS.values()), "a name in two sections"


def config_of(**settings: Any) -> Config:
    """A Config from flat settings, each routed to its section by name (a name is in one
    section only): `config_of(listen="127.0.0.1:0", embedder="hashing")`."""
    split: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for name, value in settings.items():
        if name not in _SECTION_OF:
            raise TypeError(f"no setting {name!r} in {', '.join(SECTIONS)}")
        split[_SECTION_OF[name]][name] = value
    return Config(server=ServerConfig(**split["server"]), engine=EngineConfig(**split["engine"]))
