"""The fixture of the CLI tests that run `pml` in process against the `server` fixture
(`tests/cli/test_output.py` has its own, at a chosen terminal width, answering stdout and
stderr apart)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pml_server import cli
from pml_server.api.server import RunningServer


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """`pml serve` run in process configures the root logger with a handler on the test's
    captured stderr (`api/logs.configure`); once that stream is closed, a later test's server
    logging through it printed "--- Logging error ---" into that test's output."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def run(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> object:
    """`pml ARGV` in process, 200 columns wide; returns stdout and stderr together."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PML_SERVER", f"127.0.0.1:{server.port}")

    def _run(*argv: str, expect: int = 0) -> str:
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
        out = capsys.readouterr()
        assert done.value.code == expect, out.out + out.err
        return out.out + out.err

    return _run
