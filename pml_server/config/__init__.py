"""The one configuration: `Config{server: ServerConfig, engine: EngineConfig{..., ranking,
retention}}`, each setting defined once (type, default, help) in `_model`. `pml serve` takes it
from flags and a `--config` TOML file (`serve_config`); the server takes `config.server`, the
engine `config.engine`, and both check requests against `config.engine.limits`."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from pml_server.config._addresses import (
    bind_error,
    bind_problem,
    is_loopback,
    is_loopback_host,
    listen_problem,
)
from pml_server.config._flags import add_serve_flags, flag_name, nested_flag, settings_from_args
from pml_server.config._given import NotBlank, from_environment, given, not_blank
from pml_server.config._model import (
    DEFAULT_DATA_DIR,
    DEFAULT_LISTEN,
    SECTIONS,
    Config,
    EngineConfig,
    ServerConfig,
    config_of,
)
from pml_server.config._toml import ConfigError, Settings, build, merge, read_file

STORE_ENV = "PML_STORE"


def serve_config(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Config:
    """The Config of `pml serve`: defaults, then the `--config` file, then `$PML_STORE` (read
    only without `--store`: `given`), then the flags given. ConfigError (one line, naming the
    key) for anything unusable."""
    path: Path | None = getattr(args, "config", None)
    from_file = read_file(path) if path is not None else {}
    from_flags = settings_from_args(args)
    store, where = _store(args, environ)
    from_env: Settings = {}
    if where == "--store":
        from_flags["engine"]["store"] = store
    elif store is not None:
        from_env = {"engine": {"store": store}}
    _check_store(from_file, f"{path}: engine.store")
    _check_store(from_env, STORE_ENV)
    _check_store(from_flags, "--store")
    try:
        return build(merge(from_file, from_env, from_flags))
    except ConfigError as err:
        raise ConfigError(_named(str(err), from_flags, from_file, path)) from None


def store_given(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> str:
    """The setting that gave `pml serve` its store, as `serve_config` layers them (the flag,
    then `$PML_STORE`, then the config file): what an error about the store names."""
    store, where = _store(args, environ)
    return where if store is not None else f"{getattr(args, 'config', None)}: engine.store"


def _store(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str | None, str]:
    flag = settings_from_args(args).get("engine", {}).get("store")
    return given(flag, "--store", STORE_ENV, _NO_STORE, environ)


_NO_STORE = "PML_STORE, else the config file's engine.store, else the embedded RocksDB"


def _named(message: str, from_flags: Settings, from_file: Settings, path: Path | None) -> str:
    """A value a section refused, its message led by where the value came from: the flag
    (`--max-workers: server.max_workers must be >= 1`), else the file. A nested table's class
    (`RetentionConfig.min_tries must be >= 1`) is said as the table's key."""
    for cls_name, table in _NESTED_TABLES.items():
        if not message.startswith(f"{cls_name}."):
            continue
        name = message.removeprefix(f"{cls_name}.").partition(" ")[0]
        message = f"engine.{table}.{message.removeprefix(f'{cls_name}.')}"
        flag = nested_flag(("engine", table, name))
        if flag is not None and name in from_flags.get("engine", {}).get(table, {}):
            return f"{flag}: {message}"
        if path is not None and name in from_file.get("engine", {}).get(table, {}):
            return f"{path}: {message}"
        return message
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            named = f"{section}.{f.name}" in message or message.startswith(f"{f.name} ")
            if not named:
                continue
            if f.name in from_flags.get(section, {}):
                return f"{flag_name(section, f)}: {message}"
            if path is not None and f.name in from_file.get(section, {}):
                return f"{path}: {message}"
    return message


_NESTED_TABLES = {"RetentionConfig": "retention", "RankingConfig": "ranking"}


def check_keys_file(config: Config, args: argparse.Namespace) -> None:
    """The keys file `pml serve` will load, read before anything opens, so that one it cannot
    load (missing: the server refused every call; malformed) stops it naming the flag or the
    config key that gave it (exit 2). Reading is the server's own (`read_keys_file`)."""
    keys_file = config.server.keys_file
    if keys_file is None:
        return
    from pml_server.api.security.auth import read_keys_file

    flag_given = "keys_file" in settings_from_args(args).get("server", {})
    where = "--keys-file" if flag_given else f"{getattr(args, 'config', None)}: server.keys_file"
    try:
        read_keys_file(keys_file, given=where)
    except OSError as err:
        raise ConfigError(f"{keys_file}: cannot read it ({where}): {err.strerror or err}") from None
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_store(settings: Settings, where: str) -> None:
    """A layer's `store`, refused naming the layer that gave it: one that is no DSN (the
    engine's open could only say `--store`), one libpq cannot read (its open failed with a
    traceback quoting the part it could not read, a password too), or a DSN with a password
    outside the variable."""
    store = settings.get("engine", {}).get("store")
    if not store:
        return
    from pml_server.storage import is_shared_dsn
    from pml_server.storage.postgres import has_password, problem

    if not is_shared_dsn(store):
        raise ConfigError(
            f"{where} must be a postgresql:// DSN (none: the embedded RocksDB in data_dir)"
        )
    if (why := problem(store)) is not None:
        raise ConfigError(f"{where} is no DSN libpq reads: {why}")
    if where != STORE_ENV and has_password(store):
        raise ConfigError(
            f"{where} carries a password, which others can read: set {STORE_ENV} "
            "(or PGPASSWORD, ~/.pgpass) instead"
        )


__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_LISTEN",
    "SECTIONS",
    "STORE_ENV",
    "Config",
    "ConfigError",
    "EngineConfig",
    "NotBlank",
    "ServerConfig",
    "add_serve_flags",
    "bind_error",
    "bind_problem",
    "check_keys_file",
    "config_of",
    "from_environment",
    "given",
    "is_loopback",
    "is_loopback_host",
    "listen_problem",
    "not_blank",
    "read_file",
    "serve_config",
    "store_given",
]
