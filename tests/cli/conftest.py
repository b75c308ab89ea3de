"""The fixture of the CLI tests that run `pml` in process against the `server` fixture
(`tests/cli/test_output.py` has its own, at a chosen terminal width, answering stdout and
stderr apart)."""

from __future__ import annotations

import pytest

from pml_server import cli
from pml_server.api.server import RunningServer


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
