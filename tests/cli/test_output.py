"""The `pml` CLI for people and scripts: output that fits 80 columns and pipes, empty answers in
words, `--json` on every client command, one-line errors with the documented exit codes,
`--version`, help and defaults on every flag, and `keys list` / `keys revoke` with a running
server picking the keys file up (when it changes, and on SIGHUP)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from rich.cells import cell_len

from pml_server import cli
from pml_server.api.admission import budget
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.retention import RetentionConfig
from pml_server.storage import SCHEMA_VERSION, Store
from tests.conftest import StartServer
from tests.support import eventually, open_engine, spawn_pml_serve, stop_pml_serve

READ = 'const d = await mcp.read_file({path: "FILE"}); return await mcp.parse_json(d)'
PML = str(Path(sys.executable).parent / "pml")
Run = Callable[..., tuple[str, str]]


@pytest.fixture
def run(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Run:
    """`pml ARGV` in process at COLUMNS (default 80); returns (stdout, stderr)."""
    monkeypatch.setenv("PML_SERVER", f"127.0.0.1:{server.port}")

    def _run(*argv: str, expect: int = 0, columns: int = 80) -> tuple[str, str]:
        monkeypatch.setenv("COLUMNS", str(columns))
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
        out = capsys.readouterr()
        assert done.value.code == expect, out.out + out.err
        return out.out, out.err

    return _run


def _record_three(client: PmlClient) -> None:
    for i, intent in enumerate(["Read JSON file", "Parse JSON from disk", "Load JSON data"]):
        rec = make_record(
            intent, READ.replace("FILE", f"{i}.json"), tools=["read_file", "parse_json"]
        )
        client.record(rec)


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_suggest_at_80_columns_stacks_and_shows_every_part(run: Run, client: PmlClient) -> None:
    _record_three(client)
    out, _ = run("suggest", "Read JSON file")
    assert _widest(out) <= 80, out
    assert "…" not in out  # nothing squeezed into an ellipsis
    assert "read_file > parse_json" in out
    assert "100% of 3" in out
    for part in ("match", "semantic", "lexical", "est.", "usage", "recency", "superseded"):
        assert re.search(rf"{re.escape(part)} \d\.\d\d", out), part
    assert re.search(r"total \d\.\d{3}", out)
    # Wide enough, the same reply is one table with a header row.
    wide, _ = run("suggest", "Read JSON file", columns=200)
    header = next(line for line in wide.splitlines() if "semantic" in line)
    assert all(c in header for c in ("capability", "pattern", "tools", "success", "total"))


@pytest.mark.parametrize("command", [["list"], ["list", "--capabilities"], ["show"]])
def test_wide_characters_wrap_within_80_columns(
    run: Run, client: PmlClient, command: list[str]
) -> None:
    """A stacked value is wrapped by terminal cells: an intent in Japanese (two cells a
    character) went 6 columns past 80, counted as characters."""
    intent = "読む ファイル " + "データ" * 40 + " JSON を読み込む " + "x" * 120
    saved = client.record(make_record(intent, READ.replace("FILE", "w.json"), tools=["read_file"]))
    out, _ = run(*command, *([saved.pattern] if command == ["show"] else []))
    assert "読む" in out
    assert max(cell_len(line) for line in out.splitlines()) <= 80, out


def test_suggest_in_a_pipe_fits_80_columns(server: RunningServer, client: PmlClient) -> None:
    _record_three(client)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [PML, "suggest", "Load JSON data", "--server", f"127.0.0.1:{server.port}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _widest(done.stdout) <= 80, done.stdout
    assert "read_file > parse_json" in done.stdout
    assert "\x1b[" not in done.stdout  # no colour codes in a pipe


def test_a_reader_that_went_away_is_exit_141_and_no_error(
    server: RunningServer, client: PmlClient, tmp_path: Path
) -> None:
    """`pml list | head -1`: head exits once it has its line, so pml writes into a pipe nobody
    reads. Before: rich's text exited 1 (a refused call, by the exit codes), `--json` exited 2
    (bad usage) with `{"error": {"message": ": Broken pipe"}}`, `keys list` 2 with
    `pml keys: error: [Errno 32] Broken pipe`. Now each ends quietly with 141 (128 + SIGPIPE,
    as the shell reports for a program SIGPIPE ended). The pipe's read end is closed before pml
    starts, so its first write already finds no reader."""
    _record_three(client)
    keys = tmp_path / "keys.json"
    add = [PML, "keys", "add", "--keys-file", str(keys), "--tenant", "a"]
    subprocess.run(add, check=True, stdout=subprocess.DEVNULL)
    target = ["--server", f"127.0.0.1:{server.port}"]
    for argv in (
        ["list", *target],
        ["list", "--json", *target],
        ["suggest", "Load JSON data", *target],
        ["stats", "--json", *target],
        ["keys", "list", "--keys-file", str(keys)],
    ):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run(
                [PML, *argv],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            os.close(write_end)
        assert (done.returncode, done.stderr) == (141, ""), argv


def test_empty_answers_are_said_in_words(run: Run, client: PmlClient) -> None:
    out, _ = run("suggest", "Read JSON file")
    assert "no suggestions" in out
    out, _ = run("suggest", "Read JSON file", "--explain")
    assert "no suggestions" in out
    assert "nothing filtered" in out
    assert "no patterns" in run("list")[0]
    assert "no failures" in run("failures")[0]
    _record_three(client)
    out, _ = run("suggest", "Read JSON file", "--explain")
    assert "nothing filtered" in out
    out, _ = run("suggest", "Read JSON file", "--explain", "--min-success", "1.0")
    assert "Filtered out" in out


def _client_commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {n: p for n, p in sub.choices.items() if n not in ("serve", "keys", "mcp")}


def test_show_says_when_the_answer_left_something_out() -> None:
    """A pattern GetPattern trimmed to fit 4 MiB (`truncated`: steps, recent values or intents
    left out) is shown saying so, not as a pattern without them (docs/api.md, Answer sizes)."""
    import io

    from rich.console import Console

    from pml_server._proto.pml.v1 import resources_pb2
    from pml_server.cli import _render

    shown = []
    for truncated in (False, True):
        out = io.StringIO()
        pattern = resources_pb2.Pattern(name="patterns/pat_1", truncated=truncated)
        _render.pattern_detail(Console(file=out, width=100), pattern)
        shown.append(out.getvalue())
    assert "truncated" not in shown[0]
    assert re.search(r"truncated\W+yes: the answer left out what did not fit", shown[1])


def test_every_client_command_has_json() -> None:
    for name, parser in _client_commands().items():
        assert any("--json" in a.option_strings for a in parser._actions), name


def test_json_output_of_every_client_command(run: Run, tmp_path: Path) -> None:
    rec = json.loads(
        run(
            "record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file", "--json"
        )[0]
    )
    assert rec["outcome"] == "CAPTURE_OUTCOME_SAVED"
    pattern = rec["pattern"]
    lines = [
        json_format.MessageToJson(
            make_record(f"t{i}", f"await mcp.t_{i}(x)", tools=[f"t_{i}"]), indent=None
        )
        for i in range(3)
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    imported = json.loads(run("import", str(path), "--json")[0])
    assert imported["records"] == 3
    assert imported["outcomes"] == {"saved": 3}
    suggested = json.loads(run("suggest", "Read JSON file", "--json")[0])
    assert suggested["suggestions"][0]["pattern"]["name"] == pattern
    assert set(suggested["suggestions"][0]["score"]) >= {"match", "total", "success_estimate"}
    assert len(json.loads(run("list", "--json")[0])["patterns"]) == 4
    assert len(json.loads(run("list", "--capabilities", "--json")[0])["capabilities"]) == 4
    assert json.loads(run("show", pattern, "--json")[0])["name"] == pattern
    assert json.loads(run("stats", "--json")[0])["executions"] == "4"  # proto JSON: int64 text
    assert json.loads(run("failures", "--json")[0]) == {"failures": []}
    assert json.loads(run("retention", "--json")[0])["dry_run"] is True
    assert json.loads(run("delete", pattern, "--json")[0]) == {"deleted": pattern}
    _, err = run("show", pattern, "--json", expect=1)
    assert json.loads(err)["error"]["status"] == "NOT_FOUND"


def test_a_cut_retention_list_says_so(
    start: StartServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pml retention` printed the entries it got: a cut answer (RunRetentionResponse lists the
    first actions only) read as the whole run."""
    server = start(retention=RetentionConfig(min_tries=2, min_success_rate=0.9))
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        for i in range(3):  # 1 success in 2 tries: a removal candidate each
            code = f"await mcp.t_{i}({{}})"
            client.record(make_record(f"task {i}", code, tools=[f"t_{i}"]))
            client.record(make_record(f"task {i}", code, failed_tools=[(f"t_{i}", "timeout")]))
    monkeypatch.setenv("PML_SERVER", f"127.0.0.1:{server.port}")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(budget, "RETENTION_ENTRIES", 2)
    for argv, said in [
        (["retention"], "Listed 2 of 3 actions (the answer is cut)."),
        (
            ["retention", "--apply"],
            "Listed 2 of 3 actions (the answer is cut); all 3 were applied.",
        ),
    ]:
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        out = capsys.readouterr().out
        assert done.value.code == 0, out
        assert said in " ".join(out.split()), out
    monkeypatch.setattr(budget, "RETENTION_ENTRIES", 3)
    with pytest.raises(SystemExit):
        cli.main(["retention"])
    assert "Listed" not in capsys.readouterr().out


def _one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_input_errors_are_one_line_exit_2(run: Run, tmp_path: Path) -> None:
    line = _one_line(run("import", str(tmp_path / "missing.jsonl"), expect=2)[1])
    assert line.startswith("pml import: error: cannot read")
    assert "missing.jsonl" in line
    bad = tmp_path / "rec.json"
    bad.write_text('{"intent": "x", "bogus": 1}')
    line = _one_line(run("record", "--file", str(bad), expect=2)[1])
    assert "bogus" in line
    assert "not an ExecutionRecord" in line
    line = _one_line(run("record", "--intent", "x", expect=2)[1])
    assert "--code" in line


def test_refused_rejected_and_unreachable_exit_codes(run: Run) -> None:
    line = _one_line(run("record", "--intent", " ", "--code", "x", "--tool", "t", expect=1)[1])
    assert "INVALID_ARGUMENT" in line
    assert "record.intent" in line
    out, _ = run(
        "record",
        "--intent",
        "Mail",
        "--code",
        "await mcp.gmail_send({})",
        "--failed-tool",
        "gmail_send",
        "not connected",
        expect=4,
    )
    assert "rejected" in out
    line = _one_line(run("stats", "--server", "127.0.0.1:1", expect=3)[1])
    assert "no pml server answered at 127.0.0.1:1" in line


def test_serve_on_a_data_dir_in_use_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    held = Store(data)
    try:
        with pytest.raises(SystemExit) as done:
            cli.main(
                [
                    "serve",
                    "--data-dir",
                    str(data),
                    "--embedder",
                    "hashing",
                    "--listen",
                    "127.0.0.1:0",
                ]
            )
    finally:
        held.close()
    assert done.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("pml serve: error:")
    assert "in use by another pml process" in line


@pytest.mark.parametrize(
    ("flags", "what"),
    [
        (["serve", "--listen", "127.0.0.1:{port}"], ""),
        (
            ["serve", "--listen", "127.0.0.1:0", "--otlp-http-listen", "127.0.0.1:{port}"],
            "the OTLP/HTTP address ",
        ),
        (["serve", "--listen", "127.0.0.1:0", "--metrics-port", "{port}"], "the metrics address "),
        (["mcp", "--transport", "http", "--listen", "127.0.0.1:{port}"], ""),
    ],
)
def test_a_port_in_use_is_one_line_naming_address_and_cause(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], flags: list[str], what: str
) -> None:
    """Each port `pml serve` and `pml mcp` listen on: one line, the address and the cause, exit 2
    (the gRPC port printed gRPC's own log line first, then `could not bind` without a cause; the
    MCP port `[Errno 98] Address already in use` without the address)."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        argv = [f.format(port=port) for f in flags]
        if argv[0] == "serve":
            argv += ["--data-dir", str(tmp_path / "data"), "--embedder", "hashing"]
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
    assert done.value.code == 2
    line = _one_line(capfd.readouterr().err)
    assert line == (
        f"pml {argv[0]}: error: could not bind {what}"
        f"127.0.0.1:{port}: the port is already in use (another process listens on it)"
    )


@pytest.mark.parametrize(
    ("listen", "why"),
    [
        ("127.0.0.1:99999", "port 99999 is not 0..65535"),
        ("127.0.0.1:²", "port '²' is not a number 0..65535"),
        ("127.0.0.1", "'127.0.0.1' is no host:port"),
    ],
)
def test_mcp_http_listen_that_is_no_address_is_one_line(
    capfd: pytest.CaptureFixture[str], listen: str, why: str
) -> None:
    """`:99999` was an OverflowError traceback from `bind`, and a digit that is no ASCII digit
    a ValueError traceback."""
    with pytest.raises(SystemExit) as done:
        cli.main(["mcp", "--transport", "http", "--listen", listen])
    assert done.value.code == 2
    assert _one_line(capfd.readouterr().err).startswith(f"pml mcp: error: --listen: {why}")


@pytest.mark.parametrize("path", ["", "mcp", "/a b", "/mcp?x=1", "/mcp#top"])
def test_mcp_http_path_that_is_no_url_path_is_one_line(
    capfd: pytest.CaptureFixture[str], path: str
) -> None:
    """`--path mcp` (or empty) was an AssertionError traceback from the SDK's router, exit 1;
    `/a b` served at a path no client sends as such."""
    with pytest.raises(SystemExit) as done:
        cli.main(["mcp", "--transport", "http", "--listen", "127.0.0.1:0", "--path", path])
    assert done.value.code == 2
    assert capfd.readouterr().err == (
        f"pml mcp: error: --path: {path!r} is no URL path: it starts with / and holds no space, "
        "? or # (e.g. /mcp)\n"
    )


def test_every_pml_mcp_error_carries_the_error_prefix(capfd: pytest.CaptureFixture[str]) -> None:
    """docs/cli.md, Output: an error is one line, `pml CMD: error: ...`; `pml mcp`'s lacked the
    `error:` (here a remote --listen refused; a port taken, a bad --listen or --path, a TLS
    file missing: their tests)."""
    with pytest.raises(SystemExit) as done:
        cli.main(["mcp", "--transport", "http", "--listen", "10.1.2.3:80"])
    assert done.value.code == 2
    assert _one_line(capfd.readouterr().err).startswith(
        "pml mcp: error: refusing to listen on 10.1.2.3:80: pass --allow-remote"
    )


@pytest.mark.model
def test_serve_on_a_store_of_another_model_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: exit 1 and a traceback ending in FailedPreconditionError."""
    data = tmp_path / "data"
    open_engine(data, embedder="minilm").close()
    with pytest.raises(SystemExit) as done:
        cli.main(
            ["serve", "--data-dir", str(data), "--embedder", "hashing", "--listen", "127.0.0.1:0"]
        )
    assert done.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("pml serve: error: the store at ")
    assert "holds vectors of embedding model 'all-MiniLM-L6-v2" in line
    assert "Start it with the store's model, or use another data directory." in line


@pytest.mark.parametrize("where", ["file", "file/below"])
def test_serve_on_a_data_dir_that_is_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Before: `[Errno 17] File exists: '...'`, mkdir's words for a path that is a file."""
    (tmp_path / "file").write_text("not a directory")
    data = tmp_path / where
    with pytest.raises(SystemExit) as done:
        cli.main(
            ["serve", "--data-dir", str(data), "--embedder", "hashing", "--listen", "127.0.0.1:0"]
        )
    assert done.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (
        f"pml serve: error: {data} cannot be the data directory: "
        "it, or a folder above it, is a file"
    )


def _garble_current(data: Path) -> None:
    (data / "CURRENT").write_text("garbage\n")


def _remove_current(data: Path) -> None:
    (data / "CURRENT").unlink()


def _truncate_manifest(data: Path) -> None:
    for manifest in data.glob("MANIFEST-*"):
        with manifest.open("r+b") as f:
            f.truncate(10)


def _garble_tables(data: Path) -> None:
    for table in data.glob("*.sst"):
        with table.open("r+b") as f:
            f.seek(8)
            f.write(b"X" * 32)


def _newer_schema(data: Path) -> None:
    store = Store(data)
    store.write([("meta", b"meta/schema_version", struct.pack(">I", SCHEMA_VERSION + 1))])
    store.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_garble_current, "CURRENT file corrupted"),
        (_remove_current, "it has no CURRENT file"),
        (_truncate_manifest, "MANIFEST"),
        (_garble_tables, "checksum mismatch"),
        (_newer_schema, "upgrade pml to open it"),
    ],
)
def test_serve_on_a_damaged_store_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], None],
    reason: str,
) -> None:
    """Before: exit 1 and a traceback ending in rocksdict's bare `Exception: Corruption: ...`
    (or in SchemaVersionError), with no word of which directory."""
    data = tmp_path / "data"
    open_engine(data).close()
    damage(data)
    with pytest.raises(SystemExit) as done:
        cli.main(
            ["serve", "--data-dir", str(data), "--embedder", "hashing", "--listen", "127.0.0.1:0"]
        )
    assert done.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("pml serve: error:")
    assert str(data) in line
    assert reason in line


def test_version_and_help_on_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert re.fullmatch(r"pml \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parsers = dict(sub.choices)
    keys_sub = next(
        a for a in parsers["keys"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    parsers.update({f"keys {n}": p for n, p in keys_sub.choices.items()})
    for name, p in parsers.items():
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"pml {name} {action.option_strings or action.dest}: no help"
    text = " ".join(parsers["serve"].format_help().split())
    assert "(default: 127.0.0.1:50051)" in text
    assert "(default: sync)" in text
    assert "exit codes:" in text


def _key_works(target: str, key: str) -> bool:
    """True when the server takes `key`; False when it answers UNAUTHENTICATED."""
    with PmlClient(target, api_key=key) as c:
        try:
            c.stats()
        except PmlClientError as err:
            if err.code != grpc.StatusCode.UNAUTHENTICATED:
                raise
            return False
    return True


def _keys(*argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(["keys", *argv])
    out = capsys.readouterr()
    assert done.value.code == 0, out.err
    return out.out


def test_keys_list_revoke_and_the_server_follows_the_file(
    start: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    first = _keys(
        "add", "--keys-file", str(path), "--tenant", "acme", "--label", "ci", capsys=capsys
    )
    first_key = first.split()[-1]
    server = start(keys_file=path)
    target = f"127.0.0.1:{server.port}"
    assert _key_works(target, first_key)

    second_key = _keys(
        "add", "--keys-file", str(path), "--tenant", "globex", capsys=capsys
    ).split()[-1]
    assert eventually(lambda: _key_works(target, second_key)), "a new key needed a restart"

    listed = json.loads(_keys("list", "--keys-file", str(path), "--json", capsys=capsys))["keys"]
    assert [(k["tenant"], k["role"], k["label"]) for k in listed] == [
        ("acme", "write", "ci"),
        ("globex", "write", ""),
    ]
    text = _keys("list", "--keys-file", str(path), capsys=capsys)
    assert first_key not in text
    assert second_key not in text
    assert "acme" in text
    assert "globex" in text

    revoked = _keys("revoke", "--keys-file", str(path), listed[0]["id"], capsys=capsys)
    assert "revoked" in revoked
    assert eventually(lambda: not _key_works(target, first_key)), "a revoked key still works"
    assert _key_works(target, second_key)
    with pytest.raises(SystemExit) as done:
        cli.main(["keys", "revoke", "--keys-file", str(path), listed[0]["id"]])
    assert done.value.code == 2
    assert "no key" in capsys.readouterr().err


def test_revoking_a_key_given_itself_never_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pml keys revoke` takes the key itself too; once it was revoked, revoking it again
    said `no key in keys.json with id 'pml_...'`: the key printed on stderr, where CI logs
    and terminal scrollback keep it. The error says "the key given" instead."""
    path = tmp_path / "keys.json"
    key = _keys("add", "--keys-file", str(path), "--tenant", "acme", capsys=capsys).split()[-1]
    assert "revoked" in _keys("revoke", "--keys-file", str(path), key, capsys=capsys)
    with pytest.raises(SystemExit) as done:
        cli.main(["keys", "revoke", "--keys-file", str(path), key])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert key not in err
    assert f"no key in {path} with the key given" in err


@pytest.mark.slow
def test_serve_reloads_the_keys_file_on_sighup(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    add = [PML, "keys", "add", "--keys-file", str(path), "--tenant", "acme"]
    subprocess.run(add, check=True, capture_output=True, timeout=60)
    proc = subprocess.Popen(
        [
            PML,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
            "--embedder",
            "hashing",
            "--keys-file",
            str(path),
            "--grace-seconds",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        port = None
        for line in proc.stdout:
            found = re.search(r"\(port (\d+)\)", line)
            if found:
                port = found.group(1)
                break
        assert port is not None
        key = subprocess.run(
            add, check=True, capture_output=True, text=True, timeout=60
        ).stdout.split()[-1]
        proc.send_signal(signal.SIGHUP)
        assert eventually(lambda: _key_works(f"127.0.0.1:{port}", key), 30)
    finally:
        err = stop_pml_serve(proc)
    assert "keys file reloaded (SIGHUP)" in err


def test_sighup_to_a_single_tenant_server_is_logged_and_it_goes_on_serving(
    tmp_path: Path,
) -> None:
    """SIGHUP (logrotate sends one) to a server started without a keys file ended it: the
    reload asserted a keys file path, the AssertionError came out of the signal handler, and
    `pml serve` exited 1 with a traceback, without draining. It is logged; the server serves."""
    proc, target = spawn_pml_serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--embedder", "hashing"
    )
    try:
        assert eventually(lambda: _key_works(target, ""), 30)
        proc.send_signal(signal.SIGHUP)
        assert eventually(lambda: proc.poll() is None and _key_works(target, ""))
        with PmlClient(target) as c:
            c.record(make_record("Read JSON file", "await mcp.read_file({path: 'a'})"))
        assert proc.poll() is None
    finally:
        err = stop_pml_serve(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "no keys file to reload (SIGHUP)" in err


def test_a_keys_file_that_fails_to_load_keeps_the_keys_in_force(
    start: StartServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "keys.json"
    key = _keys("add", "--keys-file", str(path), "--tenant", "acme", capsys=capsys).split()[-1]
    server = start(keys_file=path)
    target = f"127.0.0.1:{server.port}"
    caplog.set_level(logging.ERROR, logger="pml.keys")
    path.write_text('{"keys": [{"sha256": "not-a-hash", "tenant": "acme", "role": "write"}]}')
    assert eventually(lambda: "keys file not reloaded (file changed)" in caplog.text)
    assert _key_works(target, key)
    assert server.keys_watcher is not None
    assert not server.keys_watcher.reload("SIGHUP")
    assert _key_works(target, key)


def test_pml_serve_refuses_a_keys_file_that_does_not_exist(
    tmp_path: Path, start: StartServer
) -> None:
    """A misspelt --keys-file started a server with no key at all, which refused every call.
    It is refused at start, exit 2, one line naming the flag or the config key that gave it
    and the command that creates the file; nothing is created."""
    missing = tmp_path / "kyes.json"
    config = tmp_path / "pml.toml"
    config.write_text(f'[server]\nkeys_file = "{missing}"\n')
    serve = ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")]
    for argv, given in (
        ([*serve, "--keys-file", str(missing)], "--keys-file"),
        ([*serve, "--config", str(config)], f"{config}: server.keys_file"),
    ):
        # A process: one that starts serves until stopped (it did, with no key).
        try:
            done = subprocess.run(
                [PML, *argv, "--embedder", "hashing"], capture_output=True, text=True, timeout=60
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pml serve started: {argv}") from None
        assert done.returncode == 2, argv
        assert done.stderr == (
            f"pml serve: error: {missing}: no such keys file ({given}); "
            f"`pml keys add --keys-file {missing} --tenant NAME` creates one\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pml.toml"]
    with pytest.raises(ValueError, match="no such keys file"):
        start(keys_file=missing)


def test_a_keys_file_deleted_while_serving_keeps_the_keys_in_force(
    start: StartServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A keys file removed under a running server was reloaded as no keys: every call was
    refused from then on. It is a reload error like any other: logged, the keys stay, and
    the file put back is read again."""
    path = tmp_path / "keys.json"
    key = _keys("add", "--keys-file", str(path), "--tenant", "acme", capsys=capsys).split()[-1]
    server = start(keys_file=path)
    target = f"127.0.0.1:{server.port}"
    caplog.set_level(logging.INFO, logger="pml.keys")
    kept = path.read_text()
    path.unlink()
    assert eventually(lambda: "keys file not reloaded (file changed)" in caplog.text)
    assert "no such keys file" in caplog.text
    assert _key_works(target, key)
    assert server.keys_watcher is not None
    assert not server.keys_watcher.reload("SIGHUP")
    assert _key_works(target, key)
    path.write_text(kept.replace('"keys": [', '"keys": [], "old": ['))  # back, key revoked
    assert eventually(lambda: not _key_works(target, key))


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["serve", "--page-token-secret-file", "{dir}"],
            "pml serve: error: --page-token-secret-file {dir}: cannot read or create it: "
            "Is a directory",
        ),
        (
            ["serve", "--backup-dir", "{file}/backups"],
            "pml serve: error: --backup-dir {file}/backups cannot be the backup directory: it, "
            "or a folder above it, is a file",
        ),
        (
            ["keys", "add", "--tenant", "acme", "--keys-file", "{dir}"],
            "pml keys: error: --keys-file {dir}: Is a directory",
        ),
        (
            ["keys", "add", "--tenant", "acme", "--keys-file", "{dir}/none/keys.json"],
            "pml keys: error: --keys-file {dir}/none/keys.json: No such file or directory",
        ),
        # a FIFO (`mkfifo`, bash's `<(...)`) with no writer blocked each for ever
        (
            ["serve", "--keys-file", "{fifo}"],
            "pml serve: error: {fifo}: cannot read it (--keys-file): not a regular file (the "
            "server reads a keys file again whenever it changes)",
        ),
        (
            ["keys", "list", "--keys-file", "{fifo}"],
            "pml keys: error: --keys-file {fifo}: not a regular file (the server reads a keys "
            "file again whenever it changes)",
        ),
        (
            ["serve", "--tls-cert", "{fifo}", "--tls-key", "{fifo}"],
            "pml serve: error: --tls-cert {fifo}: not a regular file: write it to a file first",
        ),
        # /dev/zero as the secret grew the server by about a GB a second
        (
            ["serve", "--page-token-secret-file", "/dev/zero"],
            "pml serve: error: --page-token-secret-file /dev/zero: cannot read or create it: "
            "not a regular file (a file of 32 bytes, or a path for pml to create)",
        ),
    ],
    ids=[
        "secret-dir",
        "backup-under-file",
        "keys-dir",
        "keys-no-folder",
        "serve-keys-fifo",
        "keys-fifo",
        "tls-fifo",
        "secret-zero",
    ],
)
def test_a_path_that_cannot_be_what_its_flag_says_is_one_line_naming_the_flag(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    """A directory given as the page-token secret or the keys file, a folder that does not
    exist, said only `[Errno 21] Is a directory: '...'`; a backup dir under a file started the
    server, and every backup failed; a FIFO as the keys file or a TLS file blocked for ever.
    Each is one line naming the flag, exit 2."""
    folder, file, fifo = tmp_path / "folder", tmp_path / "file", tmp_path / "fifo"
    folder.mkdir()
    file.write_text("x")
    os.mkfifo(fifo)
    argv = [f.format(dir=folder, file=file, fifo=fifo) for f in flags]
    if argv[0] == "serve":
        argv += ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--embedder"]
        argv += ["hashing"]
    try:  # a process: one that starts serves until stopped
        done = subprocess.run([PML, *argv], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"pml started: {argv}") from None
    assert done.returncode == 2, done.stderr
    assert done.stderr == said.format(dir=folder, file=file, fifo=fifo) + "\n"


_MALFORMED_KEYS_FILES = {
    "[]": "not a keys file: an object with a `keys` list",
    '{"keys": {"a": 1}}': "not a keys file: an object with a `keys` list",
    '{"keys": ["pml_x"]}': "keys[0] is not an object",
    '{"keys": [{"tenant": "acme", "role": "write"}]}': "keys[0] has no sha256",
    '{"keys": [{"sha256": "' + "a" * 64 + '", "tenant": "acme"}]}': "keys[0] has no role",
    '{"keys": [{"sha256": "' + "a" * 64 + '", "tenant": "acme", "role": "boss"}]}': (
        "keys[0].role: unknown role 'boss'"
    ),
    "{bad": "not JSON",
    "\udcff{}": "not UTF-8 text (byte 0: invalid start byte)",
    "[" * 100_000 + "]" * 100_000: "not a keys file: nested too deep to read",
    '{"keys": [{"sha256": "' + "a" * 64 + '", "tenant": 7, "role": "write"}]}': (
        "keys[0].tenant is not a string"
    ),
    '{"keys": [{"sha256": "' + "a" * 64 + '", "tenant": "acme", "role": "write"}, '
    '{"sha256": "' + "A" * 64 + '", "tenant": "beta", "role": "read"}]}': (
        "keys[1] is the same key as keys[0] (same sha256)"
    ),
}


@pytest.mark.parametrize(
    "text",
    list(_MALFORMED_KEYS_FILES),
    ids=[f"{i}-{t[:24]}" for i, t in enumerate(_MALFORMED_KEYS_FILES)],
)
def test_a_malformed_keys_file_is_one_line_naming_it_everywhere(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], text: str
) -> None:
    """A keys file of the wrong shape (a list, an entry without its hash or role): `pml serve`
    and `pml keys list` ended in a traceback (AttributeError, KeyError, TypeError) or said only
    `'sha256'`, and `pml keys add` appended a key to a file no server could load. Each now says
    which file and which entry, exit 2, and the file is left as it was. A file that is not
    UTF-8 said only `'utf-8' codec can't decode byte 0xff`, not which file; one nested
    100,000 deep ended in a RecursionError traceback; a key listed twice for two tenants was
    silently the last entry's, and a tenant written as a number was served as its digits."""
    path = tmp_path / "keys.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    why = _MALFORMED_KEYS_FILES[text]
    serve = ["serve", "--data-dir", str(tmp_path / "d"), "--embedder", "hashing"]
    for argv in (
        [*serve, "--listen", "127.0.0.1:0", "--keys-file", str(path)],
        ["keys", "list", "--keys-file", str(path)],
        ["keys", "add", "--keys-file", str(path), "--tenant", "acme"],
        ["keys", "revoke", "--keys-file", str(path), "aaaaaaaa"],
    ):
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        assert done.value.code == 2, argv
        line = _one_line(capfd.readouterr().err)
        assert line.startswith(f"pml {argv[0]}: error: {path}: {why}"), (argv, line)
    assert path.read_bytes() == text.encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("bad", ["[]", "[" * 100_000 + "]" * 100_000], ids=["list", "deep"])
def test_a_keys_file_of_the_wrong_shape_keeps_the_keys_in_force(
    start: StartServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    bad: str,
) -> None:
    """The watcher caught a reload's KeyError and TypeError but not the AttributeError of a
    file that holds a list, nor the RecursionError of one nested 100,000 deep: its thread
    died, and no later change of the file (a revocation) was ever applied."""
    path = tmp_path / "keys.json"
    key = _keys("add", "--keys-file", str(path), "--tenant", "acme", capsys=capsys).split()[-1]
    server = start(keys_file=path)
    caplog.set_level(logging.ERROR, logger="pml.keys")
    good = path.read_text()
    path.write_text(bad)
    assert eventually(lambda: "keys file not reloaded (file changed)" in caplog.text)
    assert _key_works(f"127.0.0.1:{server.port}", key)
    path.write_text(good.replace('"keys": [', '"keys": [], "old": ['))  # the key revoked
    assert eventually(lambda: not _key_works(f"127.0.0.1:{server.port}", key))


def test_pml_mcp_without_the_sdk_is_one_line() -> None:
    """A wheel installed without its `mcp` extra: `pml mcp` says what to install, exit 2,
    not a ModuleNotFoundError traceback."""
    script = (
        "import sys; sys.modules['mcp'] = None\n"
        "from pml_server.cli import main\n"
        "main(['mcp', '--server', '127.0.0.1:1'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "pml mcp: error: the MCP SDK is not installed: pip install 'pml-server[mcp]'\n"
    )
