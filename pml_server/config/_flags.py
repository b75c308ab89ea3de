"""`pml serve`'s flags, made from the tree's fields: `--field-name` for every setting of `[server]`
and `[engine]` (plus `--retention-interval-seconds` for `[engine.retention]`), so a setting
cannot exist in one form and not the other. Flags carry no argparse defaults: what was not given
is absent from the namespace, and the file's value (or the default) stands."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any

from pml_server.config._given import NotBlank
from pml_server.config._model import SECTIONS
from pml_server.config._toml import Settings, _without_none
from pml_server.retention import RetentionConfig

# Flags for settings of the nested tables (the rest of them are set in the file).
_NESTED_FLAGS = {
    "--retention-interval-seconds": (
        ("engine", "retention", "interval_seconds"),
        float,
        "how often the retention policy runs, in seconds",
        RetentionConfig().interval_seconds,
    ),
}
_DEST_SEPARATOR = "__"


def nested_flag(path: tuple[str, ...]) -> str | None:
    """The flag of a setting of a nested table, if it has one (`--retention-interval-seconds`)."""
    return next((flag for flag, spec in _NESTED_FLAGS.items() if spec[0] == path), None)


def flag_name(section: str, field: dataclasses.Field[Any]) -> str:
    return str(field.metadata.get("flag") or "--" + field.name.replace("_", "-"))


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=NotBlank(Path, "--config", "no file: the defaults and the flags"),
        default=argparse.SUPPRESS,
        help="a TOML file of settings ([server], [engine], [engine.retention], "
        "[engine.ranking]; see pml.example.toml); flags given too override it",
    )
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            kind = _without_none(hints[field.name])
            if dataclasses.is_dataclass(kind):
                continue  # a nested table: file only (and _NESTED_FLAGS)
            shown = field.metadata.get("default_text") or field.default
            _add(
                parser,
                flag_name(section, field),
                (section, field.name),
                kind,
                str(field.metadata.get("help", "")),
                shown,
                field.metadata.get("choices"),
            )
    for flag, (path, kind, text, default) in _NESTED_FLAGS.items():
        _add(parser, flag, path, kind, text, default, None)


def _add(
    parser: argparse.ArgumentParser,
    flag: str,
    path: tuple[str, ...],
    kind: Any,
    text: str,
    shown: Any,
    choices: tuple[str, ...] | None,
) -> None:
    key = f"[{'.'.join(path[:-1])}] {path[-1]}"
    dest = _DEST_SEPARATOR.join(path)
    if kind is bool:
        state = "on" if shown else "off"
        parser.add_argument(
            flag,
            dest=dest,
            action=argparse.BooleanOptionalAction,
            default=argparse.SUPPRESS,
            help=f"{text} (default: {state}) (file: {key})",
        )
        return
    default = "" if shown is None else f" (default: {shown})"
    if kind in (str, Path) and not choices and path != ("engine", "store"):
        # An empty path was the working directory (`--data-dir ""` put a store there); the
        # store's flag is read with its variable (`given`).
        kind = NotBlank(kind, flag, "the config file's value, else the default")
    parser.add_argument(
        flag,
        dest=dest,
        type=kind,
        choices=choices,
        metavar=None if choices else path[-1].upper(),
        default=argparse.SUPPRESS,
        help=f"{text}{default} (file: {key})",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The settings the flags gave (nothing for a flag not given)."""
    out: Settings = {}
    for dest, value in vars(args).items():
        if _DEST_SEPARATOR not in dest:
            continue
        *tables, name = dest.split(_DEST_SEPARATOR)
        into = out
        for table in tables:
            into = into.setdefault(table, {})
        into[name] = value
    return out
