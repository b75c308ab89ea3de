"""Where a setting given both ways comes from: its flag or its `PML_*` variable (docs/cli.md,
"Flags, variables and the config file"). The one rule, for every command: a flag given wins,
and its variable is then not read at all (not even checked); a flag given empty (or only
spaces: a script's unset `--server "$HOST"`) is a mistake, refused naming the flag; a variable
set empty (or only spaces) is unset, the usual way to clear one (`PML_API_KEY= pml stats`);
either value is taken without the spaces around it (a variable read from a file keeps its
newline). `pml serve` layers the config file under both (`serve_config`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from pml_server.config._toml import ConfigError


def not_blank(value: str, flag: str, otherwise: str) -> str:
    """A flag's value without the spaces around it; ConfigError naming the flag if nothing is
    left. `otherwise`: what leaving the flag out gives, said in the refusal."""
    if (problem := blank_problem(value, flag, otherwise)) is not None:
        raise ConfigError(f"{flag}: {problem}")
    return value.strip()


def blank_problem(value: str, flag: str, otherwise: str | None) -> str | None:
    """Why a flag's value cannot be taken, if it is empty or only spaces (argparse names the
    flag itself: `NotBlank`). `otherwise` None: an argument that cannot be left out."""
    if value.strip():
        return None
    return f"{value!r} is empty" + (
        "" if otherwise is None else f": leave {flag} out for {otherwise}"
    )


@dataclasses.dataclass(frozen=True)
class NotBlank:
    """argparse's `type` for a text or path argument (`kind`): one given empty is refused
    naming it, as `not_blank` refuses one (an empty path was the working directory)."""

    kind: type
    flag: str
    otherwise: str | None

    def __call__(self, text: str) -> Any:
        if (problem := blank_problem(text, self.flag, self.otherwise)) is not None:
            raise argparse.ArgumentTypeError(problem)
        return self.kind(text)


def given(
    flag_value: str | None,
    flag: str,
    variable: str,
    otherwise: str,
    environ: Mapping[str, str] = os.environ,
) -> tuple[str | None, str]:
    """The value (None: neither gave one) and who gave it, `flag` or `variable`."""
    if flag_value is not None:
        return not_blank(flag_value, flag, otherwise), flag
    return from_environment(variable, environ), variable


def from_environment(variable: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """A variable's value without the spaces around it; None when unset, empty or spaces only
    (also for a variable no flag sets: PML_MODEL_CACHE)."""
    return (environ.get(variable) or "").strip() or None
