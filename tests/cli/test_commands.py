"""The `pml` CLI against a real server: the README walkthrough, command by command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format

from pml_server import cli
from pml_server.api import convert
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record, resources_pb2
from pml_server.config import serve_config
from tests.api.test_operations import pki  # noqa: F401  (the throwaway CA fixture)
from tests.conftest import StartServer
from tests.mcp.test_server import PYTHONPATH

READ = 'const d = await mcp.read_file({path: "a.json"}); return await mcp.parse_json(d)'


def test_walkthrough_record_three_suggest_and_see_score_parts(run: object) -> None:
    assert callable(run)
    for i, intent in enumerate(["Read JSON file", "Parse JSON from disk", "Load JSON data"]):
        out = run(
            "record",
            "--intent",
            intent,
            "--code",
            READ.replace("a.json", f"{i}.json"),
            "--tool",
            "read_file",
            "--tool",
            "parse_json",
            "--request-id",
            f"walk-{i}",
        )
        assert ("saved" if i == 0 else "counted") in out
    out = run("suggest", "Read JSON file", "-k", "3")
    for column in ("match", "semantic", "lexical", "est.", "usage", "recency", "total"):
        assert column in out
    assert "read_file > parse_json" in out
    assert "100% of 3" in out


def test_record_reports_rejection_and_failures_list_it(run: object) -> None:
    assert callable(run)
    out = run(
        "record",
        "--intent",
        "Mail the boss",
        "--code",
        "await mcp.gmail_send({})",
        "--failed-tool",
        "gmail_send",
        "not connected",
        "--request-id",
        "mail-1",
        expect=4,
    )
    assert "rejected" in out
    assert "gmail_send: not connected" in out
    out = run("failures")
    assert "gmail_send" in out
    assert "mail-1" in out


def test_record_failed_tool_takes_a_namespaced_tool_and_an_error_with_colons(
    run: object, server: RunningServer
) -> None:
    """`--failed-tool TOOL ERROR`: two values, so a tool name with colons (a namespace, a URL)
    and an error with colons arrive whole (one `TOOL:ERROR` value was cut at its first colon:
    tool `github`, error `create_issue:rate limited: ...`)."""
    assert callable(run)
    failed = [
        ("github:create_issue", "rate limited: retry in 5s"),
        ("https://tools.local:8080/send", "HTTP 503: unavailable"),
    ]
    argv = ["record", "--intent", "Open an issue", "--code", "await mcp.github.create_issue({})"]
    for tool, error in failed:
        argv += ["--failed-tool", tool, error]
    assert "rejected" in run(*argv, "--request-id", "issue-1", expect=4)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        found = client.list_failures().failures
    assert sorted((f.tool, f.error) for f in found if f.request_id == "issue-1") == sorted(failed)


def test_a_record_over_the_servers_message_limit_is_not_sent(run: object, tmp_path: Path) -> None:
    """10 MB of code: the call went out and gRPC answered `RESOURCE_EXHAUSTED: SERVER: Received
    message larger than max (10000093 vs. 8388608)`; now the client says it did not send it,
    how big it is and the server's limit, as `pml import` does for such a record."""
    assert callable(run)
    code = tmp_path / "big.ts"
    code.write_text("x" * 10_000_000)
    out = run("record", "--intent", "Read a file", "--code-file", str(code), expect=1)
    assert "not sent: the record is 1000" in out, out
    assert "over the server's --max-message-bytes of 8388608" in out, out
    assert "Received message larger than max" not in out


def test_record_from_json_file(run: object, tmp_path: Path) -> None:
    assert callable(run)
    rec = make_record(
        "Write CSV",
        'await mcp.write_csv({path: "o.csv"})',
        tools=["write_csv"],
        request_id="file-1",
    )
    path = tmp_path / "rec.json"
    path.write_text(json_format.MessageToJson(rec))
    assert "saved" in run("record", "--file", str(path))
    # saved with a byte order mark (some Windows editors): the same record, read past it
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json_format.MessageToJson(rec).encode())
    assert "counted" in run("record", "--file", str(marked))
    # an array of records is named for what it is, not in Python's words
    array = tmp_path / "array.json"
    array.write_text(f"[{json_format.MessageToJson(rec)}]")
    out = " ".join(run("record", "--file", str(array), expect=2).split())
    assert f"{array}: not an ExecutionRecord: not a JSON object" in out
    assert "unhashable" not in out


def test_record_from_a_json_file_takes_the_request_id_flag_or_a_fresh_one(
    run: object, tmp_path: Path
) -> None:
    """`--request-id` applies to a `--file` record too (it was dropped silently), and a file
    record without one gets a fresh UUID, as the help says (the server refused it:
    `record.request_id: must not be empty`)."""
    assert callable(run)
    rec = make_record("Write CSV", 'await mcp.write_csv({path: "o.csv"})', tools=["write_csv"])
    rec.ClearField("request_id")
    path = tmp_path / "rec.json"
    path.write_text(json_format.MessageToJson(rec))
    first = json.loads(run("record", "--file", str(path), "--json"))
    assert first["outcome"] == "CAPTURE_OUTCOME_SAVED"
    again = json.loads(run("record", "--file", str(path), "--json"))
    assert again["outcome"] == "CAPTURE_OUTCOME_COUNTED"
    assert not again["replayed"]  # a fresh request id each time
    for _ in range(2):
        out = json.loads(run("record", "--file", str(path), "--request-id", "csv-1", "--json"))
    assert out["replayed"]
    assert out["pattern"] == first["pattern"]
    pattern = json.loads(run("show", first["pattern"], "--json"))
    assert pattern["usage_count"] == "3"


def test_import_list_show_delete_stats_retention(run: object, tmp_path: Path) -> None:
    assert callable(run)
    lines = [
        json_format.MessageToJson(
            make_record(
                f"task {i}",
                f"await mcp.tool_{i % 4}(x)",
                tools=[f"tool_{i % 4}"],
                request_id=f"imp-{i}",
            ),
            indent=None,
        )
        for i in range(12)
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = run("import", str(path))
    assert "imported 12 records" in out
    assert "4 saved" in out
    assert "8 counted" in out
    out = run("import", str(path))  # again: every request id is replayed, nothing counted twice
    assert "12 replayed" in out
    stats = run("stats")
    assert "executions" in stats
    assert " 12 " in stats
    listing = run("list")
    assert "Patterns (4)" in listing
    assert "Capabilities (4)" in run("list", "--capabilities")

    name = next(line.split()[1] for line in listing.splitlines() if "pat_" in line)
    assert "tool_" in run("show", name)
    assert "deleted" in run("delete", f"patterns/{name}")
    out = run("show", name, expect=1)
    assert "NOT_FOUND" in out
    assert "Retention (dry run" in run("retention")
    assert "Retention (applied)" in run("retention", "--apply")


def test_errors_name_the_field(run: object) -> None:
    assert callable(run)
    out = run("record", "--intent", " ", "--code", "x", "--tool", "t", expect=1)
    assert "INVALID_ARGUMENT" in out
    assert "record.intent" in out
    # -k beyond Suggest's bound: named as the command line has it, not as `page_size`
    out = run("suggest", "x", "-k", "500", expect=2)
    assert "argument -k: 500 is not in 0..100" in out


@pytest.mark.parametrize(
    "argv",
    [
        ("suggest", "x", "-k"),
        ("suggest", "x", "--plans"),
        ("list", "--limit"),
        ("failures", "--limit"),
    ],
)
def test_a_count_that_is_no_integer_is_said_in_words(run: object, argv: tuple[str, ...]) -> None:
    """(Before: `argument -k: invalid _suggestions value: 'abc'`, the name of the parsing
    function, `_int32` or `_positive`, for the type.)"""
    assert callable(run)
    out = run(*argv, "abc", expect=2)
    assert out.splitlines() == [
        f"pml {argv[0]}: error: argument {argv[-1]}: 'abc' is not an integer "
        f"(`pml {argv[0]} --help` lists the flags)"
    ]


@pytest.mark.parametrize("flag", ["-k", "--plans"])
@pytest.mark.parametrize("value", ["99999999999", "-2147483649"])
def test_a_number_beyond_the_field_is_a_usage_error(run: object, flag: str, value: str) -> None:
    """A count no request field can hold (int32) is refused by the parser naming the flag,
    never a traceback from the request's setter."""
    assert callable(run)
    out = run("suggest", "x", flag, value, expect=2)
    assert f"argument {flag}" in out
    assert "Traceback" not in out


def test_show_and_delete_take_a_bare_capability_id_as_the_listings_print_it(run: object) -> None:
    """`pml record` and `pml list --capabilities` print a capability as its bare id
    (`cap_...`); `pml show` and `pml delete` looked every bare id up as a pattern: NOT_FOUND
    "pattern 'cap_...' not found" for a capability that exists."""
    assert callable(run)
    out = run("record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file")
    capability = next(w for w in out.split() if w.startswith("cap_"))
    assert capability in run("list", "--capabilities")
    shown = json.loads(run("show", capability, "--json"))
    assert shown["name"] == f"capabilities/{capability}"
    assert shown["tools"] == ["read_file"]
    assert f"deleted capabilities/{capability}" in run("delete", capability)
    assert "NOT_FOUND" in run("show", f"capabilities/{capability}", expect=1)
    assert "no patterns stored yet" in run("list")


def test_list_with_a_capability_lists_its_patterns_and_show_counts_them(run: object) -> None:
    """`pml list --capability` lists every pattern of one capability (a bare id as the listings
    print it, or its resource name); `pml show` and `pml list --capabilities` count its
    patterns from `pattern_count` (the answer names at most 100 of them)."""
    assert callable(run)
    for i in range(3):
        code = READ + f"; d.f{i}"
        run("record", "--intent", "Read JSON file", "--code", code, "--tool", "read_file")
    out = run("record", "--intent", "Send mail", "--code", "await mcp.send()", "--tool", "send")
    other = next(w for w in out.split() if w.startswith("pat_"))
    capability = json.loads(run("show", "--json", f"capabilities/{_capability_of(run)}"))
    assert capability["pattern_count"] == 3
    for name in (capability["name"], capability["name"].removeprefix("capabilities/")):
        listed = json.loads(run("list", "--json", "--capability", name))["patterns"]
        assert sorted(p["name"] for p in listed) == sorted(capability["patterns"])
    assert other not in run("list", "--capability", capability["name"])


def _capability_of(run: object) -> str:
    """The id of the capability of `read_file` (bare)."""
    assert callable(run)
    listed = json.loads(run("list", "--capabilities", "--json"))["capabilities"]
    return next(c["name"] for c in listed if c["tools"] == ["read_file"]).removeprefix(
        "capabilities/"
    )


@pytest.mark.parametrize("command", ["list", "failures"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_limit_below_one_is_a_usage_error(run: object, command: str, value: str) -> None:
    """`--limit 0` printed one pattern (or the server's 50 failures), `--limit -1` was exit 1
    blaming `page_size`, a field the command line does not have: now exit 2 naming --limit."""
    assert callable(run)
    run("record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file")
    out = run(command, "--limit", value, expect=2)
    assert "argument --limit" in out
    assert "Traceback" not in out


@pytest.mark.parametrize("key", ["bad\nkey", "k\udcff", "caf\u00e9"])
def test_an_api_key_that_cannot_be_sent_is_a_usage_error(
    run: object, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """A control character in the key was INTERNAL "Invalid metadata" (exit 1, as if the
    server refused), a byte that is not UTF-8 (`k\\xff` on the command line) a traceback
    from inside grpc; now both are exit 2 naming what the user set (`--api-key`, or
    `$PML_API_KEY`: the client's `api_key` it was, a name the user never wrote), and never
    print the key."""
    assert callable(run)
    for argv, given in ((("--api-key", key), "--api-key"), ((), "$PML_API_KEY")):
        if not argv:
            monkeypatch.setenv("PML_API_KEY", key)
        out = run("stats", *argv, expect=2)
        assert f"pml stats: error: {given} holds " in out
        assert "api_key" not in out
        assert key not in out
        assert "Traceback" not in out
        assert "INTERNAL" not in out


# Python reads a command-line byte that is not UTF-8 as a surrogate (0xff as U+DCFF): each of
# these was a UnicodeEncodeError traceback (exit 1) from protobuf, naming no argument.
_NOT_UTF8 = [
    (("suggest", "Load \udcff JSON"), "argument intent: holds b'\\xff' at position 5"),
    (("suggest", "x", "--session", "s\udcff"), "argument --session: holds b'\\xff' at position 1"),
    (("suggest", "x", "--tools", "a,\udcff"), "argument --tools: holds b'\\xff' at position 2"),
    (("suggest", "x", "--available-tool", "\udcc0\udcaf"), "argument --available-tool"),
    (("suggest", "x", "--tag", "\udcff"), "argument --tag"),
    (("suggest", "--after", "\udcff"), "argument --after"),
    (("suggest", "--after-pattern", "\udcff"), "argument --after-pattern"),
    (("show", "patterns/\udcff"), "argument name"),
    (("delete", "\udcff"), "argument name"),
    (("list", "--capability", "cap_\udcff"), "argument --capability"),
    (("record", "--intent", "r\udcff", "--code", READ), "argument --intent"),
    (("record", "--intent", "r", "--code", READ + "\udcff"), "argument --code"),
    (("record", "--intent", "r", "--code", READ, "--tool", "\udcff"), "argument --tool"),
    (("record", "--intent", "r", "--code", READ, "--session", "\udcff"), "argument --session"),
]


@pytest.mark.parametrize(("argv", "said"), _NOT_UTF8)
def test_an_argument_that_is_not_utf8_is_a_usage_error_naming_it(
    run: object, argv: tuple[str, ...], said: str
) -> None:
    """A byte that is not UTF-8 in a text argument is exit 2 naming the argument, where the
    byte is and what it is (docs/cli.md, Exit codes); before, a traceback."""
    assert callable(run)
    out = run(*argv, expect=2)
    assert out.startswith(f"pml {argv[0]}: error: "), out
    assert said in out
    assert "not UTF-8 text" in out
    assert "Traceback" not in out


def test_a_path_argument_may_hold_any_bytes(server: RunningServer, tmp_path: Path) -> None:
    """A file name is bytes, not text: one that is not UTF-8 is read as named (a process of its
    own: its output names the file, which pytest's captured stdout could not encode)."""
    path = os.path.join(os.fsencode(tmp_path), b"records-\xff.jsonl")
    record = make_record("Read JSON file", READ, tools=["read_file", "parse_json"])
    with open(path, "w") as out:
        out.write(json_format.MessageToJson(record, indent=None) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pml_server.cli", "import", path],
        env={**os.environ, "PYTHONPATH": PYTHONPATH, "PML_SERVER": f"127.0.0.1:{server.port}"},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b"records-\xff.jsonl: 1 saved" in b" ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # listed every pattern, as if no capability was named
        (("list", "--capability", ""), "argument --capability: '' is empty"),
        (("list", "--capability", "  "), "argument --capability: '  ' is empty"),
        # ranked without the session, as if none was named
        (("suggest", "read", "--session", ""), "argument --session: '' is empty"),
        (("record", "--intent", "r", "--code", READ, "--session", " "), "argument --session"),
        # listed the capabilities, the capability named dropped without a word
        (
            ("list", "--capabilities", "--capability", "cap_x"),
            "argument --capability: not allowed with argument --capabilities",
        ),
    ],
)
def test_a_filter_given_empty_or_beside_another_listing_is_a_usage_error(
    run: object, argv: tuple[str, ...], said: str
) -> None:
    """`pml list --capability "$CAP"` with CAP unset in a script listed every pattern (exit
    0), as `--session ""` ranked without a session: a flag given empty is refused naming it
    (docs/cli.md, Flags, variables and the config file), before anything is sent."""
    assert callable(run)
    run("record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file")
    out = run(*argv, expect=2)
    assert said in out, out


_BAD_SERVERS = [
    ("127.0.0.1:99999", "port 99999 is not 0..65535"),
    ("127.0.0.1:abc", "port 'abc' is not a number 0..65535"),
    (
        "http://127.0.0.1:50051",
        "'http://127.0.0.1:50051' is no host:port (an IPv6 host in brackets: [::1]:50051)",
    ),
    ("localhost", "'localhost' is no host:port (an IPv6 host in brackets: [::1]:50051)"),
]


@pytest.mark.parametrize(("value", "said"), _BAD_SERVERS)
def test_a_server_address_that_is_no_host_port_is_a_usage_error(
    run: object, monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    """`--server` or `$PML_SERVER` that is no host:port is exit 2 naming where it was given
    (before: exit 3, "no pml server answered", after the client's retries; `:99999` was tried
    as port 34463, `localhost` alone as port 443)."""
    assert callable(run)
    assert run("stats", "--server", value, expect=2) == f"pml stats: error: --server: {said}\n"
    monkeypatch.setenv("PML_SERVER", value)
    assert run("stats", expect=2) == f"pml stats: error: $PML_SERVER: {said}\n"


@pytest.mark.parametrize(("value", "said"), _BAD_SERVERS[:2])
def test_pml_mcp_with_a_server_address_that_is_no_host_port_does_not_start(
    value: str, said: str
) -> None:
    """(Before: `pml mcp` started, and each tool call failed "pml is unavailable".)"""
    done = subprocess.run(
        [sys.executable, "-m", "pml_server.cli", "mcp", "--server", value],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert (done.returncode, done.stderr) == (2, f"pml mcp: error: --server: {said}\n")


def test_a_server_certificate_the_ca_did_not_sign_is_said_naming_tls_ca(
    start: StartServer,
    pki: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--tls-ca` that did not sign the server's certificate said "no pml server answered
    ... (...CERTIFICATE_VERIFY_FAILED...)" and advised --tls-cert and --tls-key (a mutual TLS
    server's "Socket closed"), after retrying the handshake three times. One attempt now, and
    the message says the certificate was not verified, naming --tls-ca."""
    server = start(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    target = f"127.0.0.1:{server.port}"
    with pytest.raises(SystemExit) as done:
        cli.main(["stats", "--server", target, "--tls-ca", str(pki / "other.pem")])
    assert done.value.code == 3  # cli._commands.EXIT_UNREACHABLE, as any UNAVAILABLE
    said = capsys.readouterr().err
    assert said.startswith("pml stats: error: UNAVAILABLE: TLS: the server's certificate was not")
    assert "--tls-ca must be the PEM of the CA that signed it" in said
    assert "--tls-cert" not in said


@pytest.mark.parametrize("command", ["stats", "mcp"])
def test_tls_files_that_cannot_make_a_channel_are_usage_errors(
    pki: Path,  # noqa: F811
    tmp_path: Path,
    command: str,
) -> None:
    """A client certificate without its key killed the process: a failed check inside gRPC,
    SIGABRT and a stack dump (exit 134), `pml mcp` too; a key without its certificate was
    ignored (plain TCP); a CA file with no certificate in it was exit 3, "no pml server
    answered ... Failed to create security handshaker". Each is now exit 2, one line naming
    the flag (and the file)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a certificate\n")
    cert, key = pki / "client.pem", pki / "client.key"
    cases = [
        (["--tls-cert", str(cert)], "--tls-cert needs --tls-key: mutual TLS takes both"),
        (["--tls-key", str(key)], "--tls-key needs --tls-cert: mutual TLS takes both"),
        (["--tls-ca", str(notes)], f"--tls-ca {notes}: no PEM certificate in it"),
        (
            ["--tls-cert", str(notes), "--tls-key", str(key)],
            f"--tls-cert {notes}: no PEM certificate in it",
        ),
        (
            ["--tls-cert", str(cert), "--tls-key", str(notes)],
            f"--tls-key {notes}: no PEM private key in it",
        ),
    ]
    for flags, said in cases:
        argv = [command, "--server", "127.0.0.1:1", *flags]
        done = subprocess.run(
            [sys.executable, "-m", "pml_server.cli", *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": PYTHONPATH},
        )
        assert (done.returncode, done.stderr) == (2, f"pml {command}: error: {said}\n"), flags


def test_a_server_address_with_spaces_around_it_still_works(
    run: object, monkeypatch: pytest.MonkeyPatch, server: RunningServer
) -> None:
    """A `$PML_SERVER` read from a file with its newline, or pasted with a space, is the
    address (a leading space was "no pml server answered")."""
    assert callable(run)
    monkeypatch.setenv("PML_SERVER", f" 127.0.0.1:{server.port}\n")
    assert "patterns" in run("stats")


def test_an_api_key_read_with_its_newline_still_works(
    run: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert callable(run)
    monkeypatch.setenv("PML_API_KEY", "any-key-single-tenant\r\n")
    assert "patterns" in run("stats")


def test_keys_add_prints_a_key_and_stores_only_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    with pytest.raises(SystemExit) as done:
        cli.main(["keys", "add", "--keys-file", str(path), "--tenant", "acme", "--role", "read"])
    assert done.value.code == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert key.startswith("pml_")
    stored = json.loads(path.read_text())["keys"]
    assert [(k["tenant"], k["role"]) for k in stored] == [("acme", "read")]
    assert key not in path.read_text()


def test_keys_list_prints_a_label_on_its_line_without_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    label = "ci\nfake-id  other  admin\x1b[2J"
    argv = ["keys", "add", "--keys-file", str(path), "--tenant", "acme", "--label", label]
    for args in (argv, ["keys", "list", "--keys-file", str(path)]):
        with pytest.raises(SystemExit) as done:
            cli.main(args)
        assert done.value.code == 0
    listed = capsys.readouterr().out.strip().splitlines()[-1]
    assert listed.endswith("  acme  write  ci\\nfake-id  other  admin\\x1b[2J")


@pytest.mark.parametrize(
    "action", [["list"], ["list", "--json"], ["revoke", "3f9a1c0d2b7e"]], ids=" ".join
)
def test_keys_list_or_revoke_of_a_missing_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    """A misspelt --keys-file is exit 2 naming the file (docs/cli.md, Exit codes), not "no
    keys in ..." and exit 0; nothing is created. `keys add` creates the file, as before."""
    path = tmp_path / "kyes.json"
    with pytest.raises(SystemExit) as done:
        cli.main(["keys", action[0], "--keys-file", str(path), *action[1:]])
    assert done.value.code == 2
    said = capsys.readouterr()
    assert said.err == (
        f"pml keys: error: {path}: no such keys file; "
        f"`pml keys add --keys-file {path} --tenant NAME` creates one\n"
    )
    assert said.out == ""
    assert list(tmp_path.iterdir()) == []


def test_concurrent_keys_add_and_revoke_lose_no_key(tmp_path: Path) -> None:
    """Provisioning in parallel (`pml keys add ... &` per tenant): each read the file, added its
    key and replaced the file through one shared temporary name, so adds failed
    (FileNotFoundError on the temporary file) or a printed key was dropped by another's
    replace and never worked. Each change holds a lock on the file's directory."""
    from concurrent.futures import ThreadPoolExecutor

    from pml_server.api.security.auth import Role, add_key, hash_key, read_keys_file, revoke_key

    path = tmp_path / "keys.json"
    doomed = [add_key(path, "old", Role.READ) for _ in range(8)]
    with ThreadPoolExecutor(16) as pool:
        added = list(pool.map(lambda i: add_key(path, f"t{i}", Role.WRITE), range(48)))
        list(pool.map(lambda key: revoke_key(path, key), doomed))
    stored = read_keys_file(path)
    assert set(stored) == {hash_key(k) for k in added}
    assert sorted(c.tenant for c in stored.values()) == sorted(f"t{i}" for i in range(48))
    assert [p.name for p in tmp_path.iterdir()] == ["keys.json"]


def test_every_serve_flag_reaches_the_server_config() -> None:
    """A serve flag that is parsed but never passed on would be silently ignored."""
    args = cli.build_parser().parse_args(
        ["serve", "--vector-index", "exact", "--durability", "fast", "--embedder", "hashing"]
    )
    config = serve_config(args, environ={})
    engine = config.engine
    assert (engine.vector_index, engine.durability, engine.embedder) == ("exact", "fast", "hashing")
    for dest, value in vars(args).items():
        if dest == "command":
            continue
        found: object = config
        for part in dest.split("__"):
            found = getattr(found, part)
        assert found == value, f"{dest} is not passed on"


def test_suggest_with_available_tools_retrieves_among_them(run: object) -> None:
    """`--available-tool` (repeatable): a pattern using only offered tools is found although
    others fit the request better (docs/ranking.md, Context filters)."""
    assert callable(run)
    for i in range(12):
        run(
            "record",
            "--intent",
            f"generate an image of kites number {i}",
            "--code",
            f'await mcp.generate_image({{prompt: "kites {i}"}})',
            "--tool",
            "generate_image",
            "--request-id",
            f"img-{i}",
        )
    run(
        "record",
        "--intent",
        "search the web",
        "--code",
        'await mcp.search_engine_query({q: "x"})',
        "--tool",
        "search_engine_query",
        "--request-id",
        "web-1",
    )
    plain = run("suggest", "images of the history of kites", "-k", "1", "--json")
    assert "generate_image" in plain
    offered = run(
        "suggest",
        "images of the history of kites",
        "-k",
        "1",
        "--min-match",
        "0",
        "--available-tool",
        "search_engine_query",
        "--available-tool",
        "generate_human_image",
        "--json",
    )
    assert "search_engine_query" in offered
    assert "generate_image" not in offered


def test_sessions_record_and_suggest_what_comes_next(run: object) -> None:
    """`pml record --session` teaches which step follows which; `pml suggest --session` or
    `--after TOOL` without an intent answers what usually comes next (docs/ranking.md,
    Sessions), and with an intent shows the `next` factor."""
    assert callable(run)
    steps = [
        ("List the folder", "await mcp.list_dir({path: '.'})", "list_dir"),
        ("Read the JSON file", 'await mcp.read_file({path: "a.json"})', "read_file"),
    ]
    for session in ("s1", "s2", "now"):
        for n, (intent, code, tool) in enumerate(steps):
            if session == "now" and n == 1:
                break
            flags = ("--tool", tool, "--request-id", f"{session}-{n}", "--session", session)
            run("record", "--intent", intent, "--code", code, *flags)
    for context in (("--session", "now"), ("--after", "list_dir")):
        out = run("suggest", *context, "--json")
        found = json.loads(out)["suggestions"]
        assert [s["pattern"]["tools_used"] for s in found] == [["read_file"]]
        assert found[0]["score"]["transition"] > 0
    out = run("suggest", "read the file", "--session", "now")
    assert "next" in out
    # nothing ever followed read_file: said so, not "matches this intent"
    out = run("suggest", "--after", "read_file")
    assert "nothing recorded ever followed that step" in out
    out = run("suggest", "read", "--session", "bad\tid", expect=1)
    assert "--session: must not contain control" in out  # said as the flag


def test_control_characters_from_the_store_never_reach_the_terminal(
    run: object, server: RunningServer
) -> None:
    """A recorded intent or a key in the code may hold terminal escapes (an agent's input; a
    tool name holding one is refused: docs/api.md, Requests): `pml show`, `suggest` and `list`
    print them escaped, never as control characters that would rewrite the operator's
    terminal. `--json` escapes them already."""
    assert callable(run)
    from pml_server.client import PmlClient, PmlClientError

    evil = "\x1b[2J\x1b]0;owned\x07"
    code = 'const x = await mcp.list_dir({path: "."}); await mcp.evil({"\\x1b[31mRED": x})'
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        with pytest.raises(PmlClientError, match="invisible characters"):
            client.record(make_record("Clear the screen", code, tools=["list_dir", "evil" + evil]))
        intent = f"Clear the screen {evil}now"
        result = client.record(make_record(intent, code, tools=["list_dir", "evil"]))
    for argv in (
        ("show", result.pattern),
        ("show", result.capability),
        ("suggest", "clear the screen", "--explain"),
        ("list",),
        ("list", "--capabilities"),
    ):
        out = run(*argv)
        assert "\x1b" not in out, (argv, out)
        assert "\x07" not in out, (argv, out)
    assert "\\x1b[31mRED" in run("show", result.pattern)


def test_suggest_tools_listed_with_spaces_after_the_commas(run: object) -> None:
    """`--tools "read_file, parse_json"` offered the tool " parse_json" (its space kept), which
    no pattern uses: the pattern of read_file and parse_json was silently filtered out."""
    assert callable(run)
    run(
        "record",
        "--intent",
        "Read JSON file",
        "--code",
        READ,
        "--tool",
        "read_file",
        "--tool",
        "parse_json",
    )
    for tools in ("read_file,parse_json", "read_file, parse_json", " read_file , parse_json ,"):
        reply = json.loads(run("suggest", "Read JSON file", "--tools", tools, "--json"))
        assert [s["pattern"]["tools_used"] for s in reply["suggestions"]] == [
            ["read_file", "parse_json"]
        ], tools


@pytest.mark.parametrize("tools", ["", ",", " ", " , "])
def test_suggest_with_tools_naming_none_says_so(run: object, tools: str) -> None:
    """`--tools ""` (or only commas and spaces) sends an empty `available_tools`: no tool is
    reachable, so only patterns without tools can be suggested, as on the gRPC API and MCP
    (docs/ranking.md, Context filters). An empty answer says that, not that nothing matched
    the intent well enough (the pattern of read_file and parse_json matches it exactly)."""
    assert callable(run)
    run("record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file")
    for explain in ((), ("--explain",)):
        out = run("suggest", "Read JSON file", "--tools", tools, *explain)
        assert out.startswith(
            "no suggestions: --tools named no tool, so only patterns that use none can be suggested"
        ), out
    reply = json.loads(run("suggest", "Read JSON file", "--tools", tools, "--json", "--explain"))
    assert reply.get("suggestions", []) == []
    assert [f["rule"] for f in reply["filtered"]] == ["available_tools"]
    # a pattern that uses no tool is still suggested
    run("record", "--intent", "Add two numbers", "--code", "return 2 + 3")
    reply = json.loads(run("suggest", "Add two numbers", "--tools", tools, "--json"))
    assert [s["pattern"]["tools_used"] for s in reply["suggestions"]] == [[]]


@pytest.mark.parametrize(
    "flags",
    [
        ("--tools", "write_file"),
        ("--available-tool", "write_file"),
        ("--tag", "nightly"),
        ("--min-success", "0.99"),
    ],
)
def test_an_empty_answer_under_filters_says_the_filters_removed_what_matched(
    run: object, flags: tuple[str, str]
) -> None:
    """Without `--explain`, an empty answer under a filter (`--tools`, `--tag`,
    `--min-success`) that removed what matches says so and how many, not that nothing matched
    the intent (docs/cli.md, suggest); when nothing matches anyway it still says that."""
    assert callable(run)
    run("record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file")
    run(
        "record", "--intent", "Read JSON file", "--code", READ, "--tool", "read_file",
        "--failed-tool", "read_file", "disk error",
    )  # fmt: skip
    out = run("suggest", "Read JSON file", *flags)
    assert out.startswith(
        "no suggestions: 1 capability matches this intent well enough, but the filters removed"
    ), out
    out = run("suggest", "Send an email to my boss", *flags, "--min-match", "0.99")
    assert out.startswith("no suggestions: nothing stored matches this intent well enough"), out


def test_json_is_a_flag_of_the_commands_that_print_replies_not_of_mcp(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pml mcp` speaks the MCP protocol on stdout: a `--json` it took would do nothing."""
    assert cli.build_parser().parse_args(["list", "--json"]).json is True
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["mcp", "--json"])
    assert done.value.code == 2
    assert "unrecognized arguments: --json" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--max-workers", "abc"], "pml serve: error: argument --max-workers: invalid"),
        (["serve", "--log-level", "loud"], "pml serve: error: argument --log-level: invalid"),
        (["keys", "add", "--tenant", "a"], "pml keys add: error: the following arguments are"),
        (["stats", "--bogus"], "pml: error: unrecognized arguments: --bogus"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_flag_the_cli_cannot_take_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """argparse printed the whole usage before its error, 30 lines for `pml serve`: the line
    naming the flag came last. It is one line, exit 2, pointing at --help."""
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(said)
    assert err.count("\n") == 1
    assert err.endswith("--help` lists the flags)\n")


def test_an_outcome_a_newer_server_added_is_shown_as_its_number(
    run: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server newer than the CLI answers a CaptureOutcome it does not know (here 7): `pml
    record` and `pml import` died on ValueError ("Enum CaptureOutcome has no name defined for
    value 7") after the server had captured the record. The outcome is said as its number."""
    assert callable(run)
    known = convert.capture_result

    def newer(result: object) -> resources_pb2.CaptureResult:
        reply = known(result)  # type: ignore[arg-type]
        reply.outcome = 7  # type: ignore[assignment]
        return reply

    monkeypatch.setattr(convert, "capture_result", newer)
    out = run("record", "--intent", "Read JSON", "--code", READ, "--tool", "read_file")
    assert out.startswith("7  pattern ")
    record = make_record("Read JSON", READ, tools=["read_file"], request_id="imp-new")
    path = tmp_path / "records.jsonl"
    path.write_text(json_format.MessageToJson(record, indent=None) + "\n")
    assert "1 7" in run("import", str(path))
