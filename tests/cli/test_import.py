"""`pml import` on big and imperfect files: streamed a line at a time, bad lines reported with
their line number (skipped, or with --strict nothing sent), a missing file a one-line error, and
a summary that counts every record once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.protobuf import json_format

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record


def _line(i: int, request_id: str | None = None) -> str:
    record = make_record(
        f"import task {i}",
        f"await mcp.imp_tool_{i % 3}(x)",
        tools=[f"imp_tool_{i % 3}"],
        request_id=request_id if request_id is not None else f"line-rec-{i}",
    )
    return json_format.MessageToJson(record, indent=None)


def _executions(server: RunningServer) -> int:
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        return int(client.stats().executions)


def test_a_bad_line_is_reported_with_its_number_and_skipped(
    run: object, tmp_path: Path, server: RunningServer
) -> None:
    assert callable(run)
    path = tmp_path / "mixed.jsonl"
    lines = [_line(0), _line(1), "{not json", "", _line(2), '{"intent": 5, "bogus": 1}', _line(3)]
    path.write_text("\n".join(lines) + "\n")
    out = run("import", str(path), expect=2)  # cli._commands.EXIT_USAGE: bad input lines
    assert f"{path}:3: not an ExecutionRecord" in out
    assert f"{path}:6: not an ExecutionRecord" in out
    assert "imported 4 records" in out
    assert "3 saved, 1 counted, 0 rejected, 0 refused" in out
    assert "2 bad lines skipped" in out
    assert "executions/s" in out
    assert _executions(server) == 4


def test_a_file_of_another_format_shows_twenty_errors_and_counts_all(
    run: object, tmp_path: Path, server: RunningServer
) -> None:
    """Every line bad (the dev set's own format, not ExecutionRecord JSON): before, one error
    line each, 3,846 of them above the summary."""
    assert callable(run)
    path = tmp_path / "other.jsonl"
    path.write_text("".join(f'{{"id": "x-{i}", "tools": ["a"]}}\n' for i in range(100)))
    out = run("import", str(path), expect=2)
    assert out.count("not an ExecutionRecord") == 20
    assert f"{path}:20: not an ExecutionRecord" in out
    assert f"{path}:21: not an ExecutionRecord" not in out
    assert "only the first 20 are shown" in " ".join(out.split())
    assert "100 bad lines skipped" in out
    assert _executions(server) == 0


def test_a_byte_order_mark_is_read_past_and_an_array_is_named_for_what_it_is(
    run: object, tmp_path: Path, server: RunningServer
) -> None:
    """A file saved with a UTF-8 byte order mark (as some Windows editors write it) imports;
    a JSON array of records, or a record over several lines, is told to be one object a line,
    not answered in Python's words ("unhashable type: 'dict'")."""
    assert callable(run)
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + (_line(0) + "\r\n" + _line(1) + "\r\n").encode())
    out = run("import", str(marked))
    assert "imported 2 records" in out
    assert "2 saved" in out
    array = tmp_path / "array.json"
    array.write_text("[" + ", ".join([_line(2), _line(3)]) + "]\n")
    out = " ".join(run("import", str(array), expect=2).split())
    assert f"{array}:1: not an ExecutionRecord: the line is not a JSON object" in out
    assert "one ExecutionRecord object a line (JSON Lines)" in out
    assert "unhashable" not in out
    assert _executions(server) == 2


def test_strict_sends_nothing_when_a_line_is_bad(
    run: object, tmp_path: Path, server: RunningServer
) -> None:
    assert callable(run)
    path = tmp_path / "strict.jsonl"
    path.write_text("\n".join([_line(0), _line(1), "[1, 2]", _line(2)]) + "\n")
    out = run("import", "--strict", str(path), expect=2)
    assert f"{path}:3: not an ExecutionRecord" in out
    assert "nothing was sent" in out
    assert _executions(server) == 0
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join([_line(0), _line(1)]) + "\n")
    assert "imported 2 records" in run("import", "--strict", str(good))


def test_a_missing_file_is_one_line_without_traceback(run: object, tmp_path: Path) -> None:
    assert callable(run)
    out = run("import", str(tmp_path / "nope.jsonl"), expect=2)
    assert out.strip().splitlines() == [
        f"pml import: error: cannot read {tmp_path / 'nope.jsonl'}: no such file"
    ]
    assert "Traceback" not in out


def test_a_directory_or_a_pipe_is_named_for_what_it_is(run: object, tmp_path: Path) -> None:
    """Both were "no such file" (a directory, /dev/null, a pipe from `<(...)`): the message
    sent the user looking for a file that is there."""
    assert callable(run)
    out = run("import", str(tmp_path), expect=2)
    assert f"cannot read {tmp_path}: it is a directory" in out
    out = run("import", "/dev/null", expect=2)
    assert "cannot read /dev/null: not a regular file" in out
    assert "Traceback" not in out


def test_each_record_is_counted_once_even_with_repeated_request_ids(
    run: object, tmp_path: Path, server: RunningServer
) -> None:
    assert callable(run)
    path = tmp_path / "repeats.jsonl"
    # lines 1 and 3 share a request id: the second answers `replayed`, counted as one record
    # of the summary, and the store counts the execution once; a line without a request id
    # gets its own.
    lines = [_line(0, "same"), _line(1), _line(0, "same"), _line(4, ""), _line(5, "")]
    path.write_text("\n".join(lines) + "\n")
    out = run("import", str(path))
    assert "imported 5 records" in out
    assert "1 replayed" in out
    assert _executions(server) == 4


def test_a_big_file_is_streamed_not_read_whole(
    run: object, tmp_path: Path, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Path.read_text / read_bytes are never called on the file: it is read line by line."""
    assert callable(run)
    path = tmp_path / "big.jsonl"
    with path.open("w") as out:
        for i in range(600):
            out.write(_line(i) + "\n")

    def refuse(self: Path, *args: object, **kwargs: object) -> object:
        if self == path:
            raise AssertionError("the import read the whole file")
        return original_text(self, *args, **kwargs)  # type: ignore[arg-type]

    original_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    out = run("import", str(path))
    assert "imported 600 records" in out
    assert _executions(server) == 600


# A terminal's Ctrl-C reaches `pml import` with SIGINT at Python's default; the test itself may
# run where SIGINT is ignored (a shell's background job, whose children inherit that), so the
# child sets the default first, as an interactive shell's child has it.
_PML_WITH_DEFAULT_SIGINT = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from pml_server.cli import main; main(sys.argv[1:])"
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_import_says_what_was_acknowledged_and_resumes_exactly(
    tmp_path: Path, server: RunningServer, signum: signal.Signals
) -> None:
    """Ctrl-C or SIGTERM mid-import: no traceback, exit 128 + the signal, a summary of what the
    server acknowledged (all of it stored), and, since every line has a request id, importing
    the file again leaves each record counted exactly once. Before, Ctrl-C printed a gRPC
    traceback and no summary, and SIGTERM killed it silently."""
    path = tmp_path / "interrupted.jsonl"
    total = 5000
    with path.open("w") as out:
        for i in range(total):
            out.write(_line(i) + "\n")
    env = {**os.environ, "PML_SERVER": f"127.0.0.1:{server.port}", "COLUMNS": "200"}
    child = subprocess.Popen(
        [sys.executable, "-c", _PML_WITH_DEFAULT_SIGINT, "import", str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while _executions(server) < 200 and child.poll() is None:
        time.sleep(0.02)
    child.send_signal(signum)
    try:
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise AssertionError(f"pml import did not stop on {signum.name}") from None
    assert child.returncode == 128 + signum, out + err
    assert "Traceback" not in err, err
    found = re.search(rf"interrupted by {signum.name}: (\d+) of {total} records", out)
    assert found, out
    acknowledged = int(found.group(1))
    assert 0 < acknowledged < total, out
    assert "importing the file again applies each record once" in " ".join(out.split())
    # Acknowledged means stored; a record sent but not acknowledged may be stored too.
    stored = _executions(server)
    assert acknowledged <= stored < total

    resumed = subprocess.run(
        [sys.executable, "-m", "pml_server.cli", "import", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"imported {total} records" in resumed.stdout
    replayed = re.search(r"(\d+) replayed", resumed.stdout)
    assert replayed, resumed.stdout
    # The server may still have been applying what it was sent when `stored` was read.
    assert int(replayed.group(1)) >= stored, resumed.stdout
    assert _executions(server) == total
