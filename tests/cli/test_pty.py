"""The `pml` CLI in a real terminal (a pty) of 80 columns, as a person sees it: `pml show`
wraps long values instead of cutting them, booleans read yes/no, an empty intent is one
sentence, `pml import`'s bar never carries an error on its line and ends full, and `pml suggest`
keeps a table at widths below the full one by leaving chosen score columns out."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from fcntl import ioctl
from pathlib import Path

from google.protobuf import json_format

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record

ROOT = Path(__file__).resolve().parents[2]
_CONTROL = re.compile(r"\r|\x1b\[2K|\x1b\[[0-9;?]*[A-Za-z]|[^\r\x1b]+|\x1b")


def _screen_lines(raw: str) -> list[str]:
    """What the terminal shows, line by line: carriage returns and line clears applied, other
    escape sequences (colours, cursor hiding) dropped."""
    lines = []
    for physical in raw.split("\n"):
        cells: list[str] = []
        cursor = 0
        for token in _CONTROL.findall(physical):
            if token == "\r":
                cursor = 0
            elif token == "\x1b[2K":
                cells = []
            elif token.startswith("\x1b"):
                continue
            else:
                cells[cursor : cursor + len(token)] = list(token)
                cursor += len(token)
        lines.append("".join(cells).rstrip())
    return lines


def _in_terminal(
    server: RunningServer, *argv: str, columns: int = 80, cwd: Path = ROOT
) -> tuple[int, list[str]]:
    """`pml ARGV` with stdout and stderr on a pty of `columns` x 40; (exit code, screen lines)."""
    leader, follower = pty.openpty()
    ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    # this tree's server and client packages (the client's generated code must match)
    pythonpath = os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])
    env.update(PYTHONPATH=pythonpath, PML_SERVER=f"127.0.0.1:{server.port}", TERM="xterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pml_server.cli", *argv],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=cwd,
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                break
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the process closed its side
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=60)
    finally:
        os.close(leader)
    return code, _screen_lines(b"".join(chunks).decode().replace("\r\n", "\n"))


def _record(client: PmlClient) -> str:
    code = 'const d = await mcp.read_file({path: "a.json"}); return JSON.parse(d)'
    return client.record(make_record("Read a JSON file", code, tools=["read_file"])).pattern


def test_show_pattern_wraps_long_values_and_says_no(
    server: RunningServer, client: PmlClient
) -> None:
    name = _record(client)
    pattern = client.get_pattern(name)
    code, lines = _in_terminal(server, "show", name)
    assert code == 0, lines
    screen = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80, screen
    assert "…" not in screen
    assert "False" not in screen
    assert re.search(r"│ flagged for removal │ no\s+│", screen), screen
    # Whole once the table's rules and padding are taken away: wrapped, not cut.
    squashed = re.sub(r"[│\s]", "", screen)
    assert pattern.code_hash in squashed
    schema = json.dumps(json.loads(pattern.parameter_schema_json), separators=(",", ":"))
    assert len(schema) > 60
    assert schema in squashed


def test_empty_intent_is_one_sentence_naming_the_field(server: RunningServer) -> None:
    code, lines = _in_terminal(server, "suggest", "")
    assert code == 1
    said = [line for line in lines if line]
    assert said == ["pml suggest: error: INVALID_ARGUMENT: intent: must not be empty"]


def _import_file(path: Path, prefix: str) -> Path:
    good = [
        json_format.MessageToJson(
            make_record(
                f"task {i}",
                f"await mcp.tool_{i}(x)",
                tools=[f"tool_{i}"],
                request_id=f"{prefix}{i}",
            ),
            indent=None,
        )
        for i in range(3)
    ]
    path.write_text("\n".join([good[0], "{not json", good[1], '{"intent": 5}', good[2], "[1]"]))
    return path


def test_import_bar_keeps_its_line_ends_full_and_counts_replays_alone(
    server: RunningServer, tmp_path: Path
) -> None:
    _import_file(tmp_path / "m.jsonl", "bar-")
    code, lines = _in_terminal(server, "import", "m.jsonl", cwd=tmp_path)
    assert code == 2, lines  # bad lines: exit 2, the good ones imported
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 3, lines
    for line in errors:  # on a line of its own, never after the bar
        assert line.startswith("error m.jsonl:"), line
    bars = [line for line in lines if line.startswith("importing")]
    assert bars, lines
    assert "6/6" in bars[-1], bars
    assert "100%" in bars[-1], bars
    text = " ".join(" ".join(lines).split())
    assert ".." not in text
    assert re.search(r"\(char 1\)\. ", text), text  # the parser's message, one period
    summary = text[text.index("imported 3 records") :]
    assert "3 saved, 0 counted, 0 rejected, 0 refused, 0 replayed, 3 bad lines skipped" in summary
    assert summary.endswith("reconnects: 0.")

    code, lines = _in_terminal(server, "import", "m.jsonl", cwd=tmp_path)
    assert code == 2
    text = " ".join(" ".join(lines).split())
    # Nothing was saved or counted again: the replays are said as replays only.
    assert "0 saved, 0 counted, 0 rejected, 0 refused, 3 replayed (applied before" in text, text


def test_suggest_table_leaves_score_columns_out_before_stacking(
    server: RunningServer, client: PmlClient
) -> None:
    _record(client)
    code, lines = _in_terminal(server, "suggest", "Read a JSON file", columns=120)
    assert code == 0
    assert max(len(line) for line in lines) <= 120
    header = next(line for line in lines if "capability" in line and "total" in line)
    for column in ("pattern", "tools", "success", "match", "semantic", "lexical", "est."):
        assert column in header, header
    assert "superseded" not in header
    assert "recency" not in header
    left_out = " ".join(" ".join(lines).split())
    assert "left out at this width: superseded, recency" in left_out
    # At 80 columns the narrowest table does not fit: the stacked form shows every part.
    code, lines = _in_terminal(server, "suggest", "Read a JSON file")
    assert code == 0
    assert not any("┃" in line for line in lines)
    assert any("superseded 1.00" in line for line in lines), lines


def _walkthrough(client: PmlClient) -> None:
    """The README's walkthrough: three reads of JSON, one write."""
    code = 'const d = await mcp.read_file({path: "F"}); return await mcp.parse_json(d)'
    for intent, name in [
        ("Read JSON file", "a.json"),
        ("Parse JSON from disk", "b.json"),
        ("Load JSON data", "c.json"),
    ]:
        client.record(
            make_record(intent, code.replace("F", name), tools=["read_file", "parse_json"])
        )
    write = 'await mcp.write_file({path: "o.json"})'
    client.record(make_record("Write JSON file", write, tools=["write_file"]))


def test_suggest_says_why_a_contradicting_suggestion_is_doubtful(
    server: RunningServer, client: PmlClient
) -> None:
    _walkthrough(client)
    reason = "the request reads ('load'); its tools only write (write_file)"
    code, lines = _in_terminal(server, "suggest", "Load a JSON file")
    assert code == 0
    screen = "\n".join(lines)
    first, second = screen.split("\n2. ", 1)
    assert "read_file > parse_json" in first
    assert "its tools only" not in first  # (the tests' hashing embedder may call it weak)
    assert "write_file" in second
    assert f"  caution  {reason}" in second, screen
    code, lines = _in_terminal(server, "suggest", "Load a JSON file", columns=200)
    assert code == 0
    row = next(line for line in lines if "write_file" in line and "│" in line)
    assert row.startswith("│ 2! │"), row
    assert f"2! {reason}" in lines
