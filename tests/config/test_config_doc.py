"""docs/configuration.md is what `tools/gen_config_doc.py` makes of the config tree, and names
every `pml serve` flag and every key of every table (as pml.example.toml must)."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import typing
from pathlib import Path

from pml_server.config import add_serve_flags
from pml_server.config._toml import _without_none
from tests.config.test_config import TABLES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def test_the_reference_is_generated_from_the_tree() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_config_doc.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_reference_names_every_flag_and_key() -> None:
    text = DOC.read_text()
    parser = argparse.ArgumentParser()
    add_serve_flags(parser)
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert f"`{action.option_strings[0]}`" in text, action.option_strings[0]
    for table, cls in TABLES.items():
        section = text.split(f"## `[{table}]`", 1)[1].split("\n## ", 1)[0]
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if dataclasses.is_dataclass(_without_none(hints[field.name])):
                continue
            assert f"| `{field.name}` |" in section, f"[{table}] {field.name}"
