"""Reading a `--config` TOML file against the tree, and building the final Config.

Settings come in layers, later ones winning: the defaults, the file, the environment
(`PML_STORE`), the flags. Every layer is a `Settings` tree of checked values
(`{"server": {...}, "engine": {..., "retention": {...}, "ranking": {...}}}`); only the merged
one is turned into dataclasses, so `[engine.ranking]` replaces values of the ranking defaults
of the embedder that is finally chosen, whichever layer chose it."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import select
import stat
import time
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pml_server.config._model import Config, EngineConfig, ServerConfig
from pml_server.ranking.config import RankingConfig, default_ranking
from pml_server.retention import RetentionConfig

Settings = dict[str, Any]


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one line naming the key."""


# A config file is a few KB (pml.example.toml, every key with its help, is under 16 KB); a
# larger one is refused before it is parsed (`--config /dev/zero` grew by 500 MB a second).
MAX_FILE_BYTES = 1024 * 1024


# How long `--config` naming a FIFO waits for a writer (docs/configuration.md): a named pipe
# nothing writes to blocked `pml serve` for ever, before it had said a word.
FIFO_WRITER_SECONDS = 10.0


def read_file(path: Path) -> Settings:
    """The checked settings of a TOML file; ConfigError naming the first bad key."""
    try:
        raw = _read_bytes(path, MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_FILE_BYTES // 1024 // 1024} MiB: no config file is (a "
                "file of every key is a few KB)"
            )
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except ConfigError:
        raise
    except ValueError as err:
        # tomllib's own int() of an integer of more than 4300 digits: a traceback (exit 1); its
        # advice (sys.set_int_max_str_digits) is for the program, not for the file's author
        raise ConfigError(f"{path}: not valid TOML: {str(err).partition(';')[0]}") from None
    return _checked(path, data, Config, "")


def _read_bytes(path: Path, most: int) -> bytes:
    """At most `most` bytes of `path`. A FIFO (`mkfifo`, or bash's `<(cat pml.toml)`) is opened
    without waiting for a writer, then read until its writer closes it; with no writer within
    `FIFO_WRITER_SECONDS`, ConfigError. Any other file is read as usual."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as file:
                return file.read(most)
        return _read_fifo(path, fd, most)
    finally:
        os.close(fd)


def _read_fifo(path: Path, fd: int, most: int) -> bytes:
    """A FIFO opened without blocking: its bytes until its writer closes it. A read of 0 bytes
    before any writer came means none has opened it yet: poll() then waits for one (on Linux it
    reports a FIFO's end only once a writer has come), `FIFO_WRITER_SECONDS` at most. A writer
    that came and has not written yet (a read would block) is waited for as any pipe is."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + FIFO_WRITER_SECONDS
    chunks: list[bytes] = []
    size = 0
    writer = False
    while size < most:
        try:
            chunk = os.read(fd, min(64 * 1024, most - size))
        except BlockingIOError:  # a writer holds it open and has written nothing yet
            writer = True
            poller.poll()
            continue
        if chunk:
            writer = True
            chunks.append(chunk)
            size += len(chunk)
            continue
        if writer:  # its writer closed it: the end of the file
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConfigError(
                f"{path}: no writer on this FIFO after {FIFO_WRITER_SECONDS:g} s (write the "
                "config into it, or give a regular file)"
            )
        writer = bool(poller.poll(max(1, math.ceil(left * 1000))))
    return b"".join(chunks)


def _checked(path: Path, data: dict[str, Any], cls: type, prefix: str) -> Settings:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    known = list(fields)
    out: Settings = {}
    for key, value in data.items():
        where = f"{prefix}{key}"
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            table = f"[{prefix.rstrip('.')}]" if prefix else "the top level"
            raise ConfigError(f"{path}: unknown key {where} in {table}{hint}")
        kind = _without_none(hints[key])
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: {where} must be a table ([{where}])")
            out[key] = _checked(path, value, kind, f"{where}.")
        else:
            out[key] = _scalar(path, where, value, kind)
            choices = fields[key].metadata.get("choices")
            if choices and value not in choices:  # `log_level = "verbose"` was a traceback
                raise ConfigError(f"{path}: {where} must be one of {', '.join(choices)}")
    return out


def _without_none(hint: Any) -> Any:
    """`X | None` -> X (TOML has no null: an absent key is the None)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return hint


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _toml_type(value: Any) -> str:
    """What a TOML value is, named without the value: a wrong-typed one may still be a secret
    (a DSN with its password written as a table), and the error goes to a terminal and logs."""
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in ((dict, "a table"), (list, "an array"), (int, "an integer")):
        if isinstance(value, kind):
            return name
    return {float: "a float", str: "a string"}.get(type(value), "a date or time")


def _scalar(path: Path, where: str, value: Any, kind: Any) -> Any:
    def wrong() -> ConfigError:
        expected = "a path (string)" if kind is Path else _TYPE_NAMES.get(kind, str(kind))
        return ConfigError(f"{path}: {where} must be {expected}, got {_toml_type(value)}")

    if kind is bool:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if isinstance(value, bool):  # a bool is an int in Python, never in a config
        raise wrong()
    if kind is int:
        if not isinstance(value, int):
            raise wrong()
        return value
    if kind is float:
        if not isinstance(value, int | float):
            raise wrong()
        return float(value)
    if kind is str or kind is Path:
        if not isinstance(value, str):
            raise wrong()
        if not value.strip():  # a path of "" was the working directory (`data_dir = ""`)
            raise ConfigError(f"{path}: {where} is empty: leave it out for the default")
        return Path(value) if kind is Path else value
    raise wrong()


def merge(*layers: Settings) -> Settings:
    """Later layers win, key by key, tables merged recursively."""
    out: Settings = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
    return out


def build(settings: Settings) -> Config:
    """The Config of merged settings; ConfigError (one line) for a value a section refuses."""
    engine: Settings = dict(settings.get("engine", {}))
    retention = engine.pop("retention", {})
    ranking = engine.pop("ranking", None)
    try:
        built = EngineConfig(**engine, retention=RetentionConfig(**retention))
        if ranking:  # an empty table: the family defaults, as when it is left out
            base: RankingConfig = default_ranking(built.embedder)
            built = dataclasses.replace(built, ranking=dataclasses.replace(base, **ranking))
        return Config(server=ServerConfig(**settings.get("server", {})), engine=built)
    except ValueError as err:
        raise ConfigError(str(err)) from None
