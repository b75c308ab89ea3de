"""`pml` run with a standard stream closed (`pml stats >&-`, `pml mcp <&-`) or an empty
`--server`: one line and exit 2, before anything is sent (docs/cli.md, Exit codes); a refusal
names the flag the user gave."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pml_server import cli
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient
from tests.mcp.test_server import PYTHONPATH


def _pml(
    *argv: str, closing: tuple[int, ...], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `pml` in a child process whose descriptors `closing` are closed, by a shell's
    `>&-` (a `preexec_fn` would run Python in the forked child of this process, whose gRPC
    threads' fork handlers may abort it); stderr is read unless it is one of them."""
    closed = " ".join(f"{fd}>&-" for fd in closing)
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {closed}', "sh", sys.executable, "-m", "pml_server.cli", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})},
    )


def test_a_record_with_stdout_closed_is_refused_before_it_is_sent(
    server: RunningServer,
) -> None:
    """Closed stdout was a traceback (`'NoneType' object has no attribute 'flush'`) after
    the record had been stored; `pml keys add` would have stored a key nobody saw."""
    target = f"127.0.0.1:{server.port}"
    done = _pml(
        "record", "--server", target, "--intent", "Read JSON", "--code", "x()", closing=(1,)
    )
    said = "pml record: error: standard output is closed: give it /dev/null instead\n"
    assert (done.returncode, done.stderr) == (2, said)
    with PmlClient(target) as client:
        assert client.stats().patterns == 0


def test_keys_add_with_stdout_closed_adds_no_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    done = _pml("keys", "add", "--keys-file", str(keys), "--tenant", "acme", closing=(1,))
    said = "pml keys: error: standard output is closed: give it /dev/null instead\n"
    assert (done.returncode, done.stderr) == (2, said)
    assert not keys.exists()


def test_pml_mcp_over_stdio_with_stdin_closed_says_so() -> None:
    """(Before: a traceback, `'NoneType' object has no attribute 'buffer'`.)"""
    done = _pml("mcp", "--server", "127.0.0.1:1", closing=(0,))
    said = "pml mcp: error: standard input is closed: give it /dev/null instead\n"
    assert (done.returncode, done.stderr) == (2, said)


def test_stats_with_stdout_and_stderr_closed_exits_2_without_a_traceback(
    server: RunningServer,
) -> None:
    done = _pml("stats", "--server", f"127.0.0.1:{server.port}", closing=(1, 2))
    assert done.returncode == 2


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_server_flag_is_a_usage_error(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--server ""` (a script's unset variable) went to $PML_SERVER, and `--server " "` to
    127.0.0.1:50051 over $PML_SERVER: exit 3 after the retries, at an address nobody gave."""
    monkeypatch.setenv("PML_SERVER", "127.0.0.1:1")
    with pytest.raises(SystemExit) as done:
        cli.main(["stats", "--server", value])
    assert done.value.code == 2
    said = (
        f"pml stats: error: --server: {value!r} is empty: leave --server out for $PML_SERVER, "
        "else 127.0.0.1:50051\n"
    )
    assert capsys.readouterr().err == said


def test_a_usage_error_with_json_is_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json` errors are one JSON object on stderr; an address that is no host:port was
    said as text."""
    monkeypatch.delenv("PML_SERVER", raising=False)
    with pytest.raises(SystemExit) as done:
        cli.main(["stats", "--json", "--server", "localhost"])
    assert done.value.code == 2
    said = json.loads(capsys.readouterr().err)
    assert said == {
        "error": {
            "message": "--server: 'localhost' is no host:port (an IPv6 host in brackets: "
            "[::1]:50051)"
        }
    }


def test_a_refused_suggest_flag_is_named_as_the_flag(run: object) -> None:
    """`--plans 11` was refused as `plan_size`, `--min-match 2` as `min_match`: request
    fields the command line does not have. `--json` keeps the proto field names."""
    assert callable(run)
    said = run("suggest", "x", "--plans", "11", "--min-match", "2", expect=1)
    assert said == (
        "pml suggest: error: INVALID_ARGUMENT: --min-match: must be between 0 and 1; "
        "--plans: must be 0..10 (unset means 3)\n"
    )
    error = json.loads(run("suggest", "x", "--plans", "11", "--json", expect=1))["error"]
    assert error["violations"] == [
        {"field": "plan_size", "description": "must be 0..10 (unset means 3)"}
    ]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--tag", "io", "--tag", ""), "--tag #2: must not be empty"),
        (("--tag", "t") * 33, "--tag: is 33 items; the limit is 32 items"),
        (("--session", "a\x01b"), "--session: must not contain control or invisible"),
        (("--after", "read_file", "--after", " "), "--after #2: must not be empty"),
        (("--after-pattern", "capabilities/x"), "--after-pattern #1: must be `patterns/"),
        (("--tools", "a,b", "--available-tool", "c\u200b"), "--tools/--available-tool #3: must"),
    ],
)
def test_every_refused_suggest_flag_is_named_as_the_flag(
    run: object, flags: tuple[str, ...], said: str
) -> None:
    """Refused as `tags[1]`, `context.session_id`, `context.previous_tools[1]`,
    `available_tools.tools[2]`: request fields the command line does not have (an item of a
    repeated flag by its place, from 1; `--tools` and `--available-tool` make one list)."""
    assert callable(run)
    out = run("suggest", "x", *flags, expect=1)
    assert out.startswith(f"pml suggest: error: INVALID_ARGUMENT: {said}"), out
    error = json.loads(run("suggest", "x", *flags, "--json", expect=1))["error"]
    assert not error["violations"][0]["field"].startswith("-")  # --json: the proto's names


def test_ctrl_c_while_a_command_waits_is_exit_130_without_a_traceback() -> None:
    """Ctrl-C before a command has a handler of its own (`pml serve` opening its store, a
    client waiting for a server that does not answer) was a KeyboardInterrupt traceback."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        child = subprocess.Popen(
            [sys.executable, "-m", "pml_server.cli", "stats", "--server", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": PYTHONPATH},
        )
        connection, _ = silent.accept()  # the command is running and waiting for its answer
        with connection:
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
    assert (child.returncode, out, err) == (130, "", "\n")
