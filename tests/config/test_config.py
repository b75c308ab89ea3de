"""The one config tree: `pml serve --config FILE.toml`, the flags made from the same fields, the
layers (defaults < file < $PML_STORE < flags), refusals naming the key, and pml.example.toml."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import grpc
import pytest

from pml_server import cli
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.config import (
    SECTIONS,
    Config,
    ConfigError,
    EngineConfig,
    ServerConfig,
    config_of,
    read_file,
    serve_config,
)
from pml_server.config._toml import _without_none
from pml_server.embedding import HashingEmbedder
from pml_server.ranking import RankingConfig, default_ranking
from pml_server.retention import RetentionConfig
from tests.support import spawn_pml_serve, stop_pml_serve

EXAMPLE = Path(__file__).resolve().parents[2] / "pml.example.toml"
TABLES: dict[str, type] = {
    "server": ServerConfig,
    "engine": EngineConfig,
    "engine.retention": RetentionConfig,
    "engine.ranking": RankingConfig,
}


def _serve_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["serve", *argv])


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pml.toml"
    path.write_text(text)
    return path


def _keys_by_table(text: str) -> dict[str, set[str]]:
    """The keys each [table] of a TOML text names, set or commented out (`# key = ...`)."""
    found: dict[str, set[str]] = {}
    table = ""
    for line in text.splitlines():
        header = re.fullmatch(r"\[([a-z.]+)\]", line.strip())
        if header:
            table = header.group(1)
            continue
        key = re.fullmatch(r"#?\s*([a-z_]+) = .+", line.strip())
        if key:
            found.setdefault(table, set()).add(key.group(1))
    return found


def test_the_example_file_parses_to_the_defaults_and_names_every_setting() -> None:
    assert serve_config(_serve_args("--config", str(EXAMPLE)), environ={}) == Config()
    named = _keys_by_table(EXAMPLE.read_text())
    for table, cls in TABLES.items():
        expected = {
            f.name
            for f in dataclasses.fields(cls)
            if not dataclasses.is_dataclass(_without_none(typing.get_type_hints(cls)[f.name]))
        }
        assert expected == named.get(table, set()), f"[{table}] of pml.example.toml"


def test_the_examples_commented_ranking_values_are_minilms_defaults() -> None:
    ranking = EXAMPLE.read_text().split("[engine.ranking]", 1)[1]
    shown = dict(re.findall(r"^# ([a-z_]+) = (.+)$", ranking, re.MULTILINE))
    defaults = default_ranking("minilm")
    assert {k: type(getattr(defaults, k))(v) for k, v in shown.items()} == {
        f.name: getattr(defaults, f.name) for f in dataclasses.fields(RankingConfig)
    }


def test_the_operations_pages_config_file_is_taken_as_its_comment_says(tmp_path: Path) -> None:
    """docs/operations.md's TOML example, with the command its first line gives: every key
    known, each value taken, the --listen flag over [server] listen."""
    page = (EXAMPLE.parent / "docs" / "operations.md").read_text()
    found = re.search(r"^```toml\n# (pml serve [^\n]*?)  .*?\n(.*?)^```", page, re.M | re.S)
    assert found, "docs/operations.md lost its TOML example"
    command, text = found.groups()
    argv = command.split()[1:]
    argv[argv.index("pml.toml")] = str(_write(tmp_path, text))
    config = serve_config(cli.build_parser().parse_args(argv), environ={})
    assert config.server.listen == "0.0.0.0:50051"
    assert (config.server.keys_file, config.server.metrics_port) == (Path("keys.json"), 9464)
    assert config.engine.data_dir == Path("/var/lib/pml")
    assert (config.engine.max_code_bytes, config.engine.snapshot_interval_seconds) == (131072, 120)
    assert (config.engine.retention.interval_seconds, config.engine.retention.auto_remove) == (
        600,
        False,
    )
    assert config.engine.ranking == dataclasses.replace(default_ranking("minilm"), min_success=0.6)


def test_each_server_and_engine_key_of_the_example_is_under_its_own_help() -> None:
    """Each [server] and [engine] key of pml.example.toml has the setting's help (its first
    words) in the comment just above it, so a reader learns what the key does. Before, the
    otlp_pending_spans comment stood above otlp_http_listen's, and otlp_pending_seconds had
    none."""
    helps = {
        (table, f.name): f.metadata["help"]
        for table in ("server", "engine")
        for f in dataclasses.fields(TABLES[table])
        if "help" in f.metadata
    }
    table, comment, misplaced = "", [], []
    for line in EXAMPLE.read_text().splitlines():
        header = re.fullmatch(r"\[([a-z.]+)\]", line)
        key = re.fullmatch(r"#?\s*([a-z_]+) = .+", line)
        if header or not line.strip():
            table, comment = header.group(1) if header else table, []
        elif key:
            if (table, key.group(1)) in helps:
                said = " ".join(c for c in comment if not c.startswith("(default")).split()
                if said[:3] != helps[table, key.group(1)].split()[:3]:
                    misplaced.append(f"{table}.{key.group(1)}: {' '.join(said[:6])}")
            comment = []
        else:
            comment.append(line.removeprefix("# "))
    assert misplaced == []


def test_every_setting_of_server_and_engine_is_a_flag_in_the_help() -> None:
    text = subprocess.run(
        [str(Path(sys.executable).parent / "pml"), "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    text = " ".join(text.split())  # argparse wraps the help lines
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if dataclasses.is_dataclass(_without_none(hints[field.name])):
                continue
            assert f"[{section}] {field.name})" in text, f"no flag for {section}.{field.name}"
    assert "--retention-interval-seconds" in text
    assert "--config" in text


def _flag_values(
    parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()
) -> tuple[list[str], dict[str, Any]]:
    """An argv giving every serve flag (but those in `skip`) a value other than its default,
    and those values by dest (the config path joined by `__`)."""
    defaults = Config()
    argv: list[str] = []
    expected: dict[str, Any] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "config", *skip):
            continue
        found: Any = defaults
        for part in action.dest.split("__"):
            found = getattr(found, part)
        flag = action.option_strings[0]
        kind = getattr(action.type, "kind", action.type)  # a text or path flag: `_NotBlank`
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if not found else f"--no-{flag[2:]}")
            expected[action.dest] = not found
            continue
        if action.choices:
            value: Any = next(c for c in action.choices if c != found)
        elif kind is int:
            value = 7 if found != 7 else 9
        elif kind is float:
            value = 0.5 if found != 0.5 else 0.25
        elif kind is Path:
            value = Path(f"given-{action.dest}")
        elif action.dest.endswith("listen"):  # a host:port
            value = f"given-{action.dest}:7"
        elif action.dest.endswith("store"):  # a DSN
            value = "postgresql://given/db"
        else:
            value = f"given-{action.dest}"
        argv += [flag, str(value)]
        expected[action.dest] = value
    return argv, expected


def test_every_serve_flag_lands_in_its_setting() -> None:
    parser = argparse.ArgumentParser()
    from pml_server.config import add_serve_flags

    add_serve_flags(parser)
    # --backup-dir is refused beside --store (the next test): it lands on its own.
    argv, expected = _flag_values(parser, skip=("engine__backup_dir",))
    config = serve_config(parser.parse_args(argv), environ={})
    for dest, value in expected.items():
        found: Any = config
        for part in dest.split("__"):
            found = getattr(found, part)
        assert found == value, dest
    alone = serve_config(parser.parse_args(["--backup-dir", "given-backups"]), environ={})
    assert alone.engine.backup_dir == Path("given-backups")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--store", "postgresql://h/db"], "a shared PostgreSQL store is backed up with"),
        (["--data-dir", "d"], "must be outside data_dir"),
        (["--data-dir", "d/.."], "must be outside data_dir"),
        (["--backup-keep", "0"], "engine.backup_keep must be >= 1"),
        (["--backup-interval-seconds", "-1"], "engine.backup_interval_seconds must be >= 0"),
    ],
)
def test_backups_refused_where_they_cannot_work(argv: list[str], words: str) -> None:
    """A backup dir beside a shared store, or inside the data dir it backs up (a copy of the
    data dir would carry its backups), is refused at start, naming the key."""
    with pytest.raises(ConfigError, match=r"engine\.backup") as refused:
        serve_config(_serve_args("--backup-dir", "d/backups", *argv), environ={})
    assert words in str(refused.value)


def test_layers_defaults_file_environment_flags(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[server]\nmax_workers = 3\ngrace_seconds = 2.5\n[engine]\nstore = "postgresql://f/db"\n'
        "failure_log_size = 11\n[engine.retention]\ninterval_seconds = 5\nauto_remove = true\n",
    )
    config = serve_config(_serve_args("--config", str(path), "--max-workers", "5"), environ={})
    assert (config.server.max_workers, config.server.grace_seconds) == (5, 2.5)
    assert config.server.listen == ServerConfig().listen
    assert (config.engine.store, config.engine.failure_log_size) == ("postgresql://f/db", 11)
    assert config.engine.retention == RetentionConfig(interval_seconds=5.0, auto_remove=True)
    env = {"PML_STORE": "postgresql://env/db"}
    assert (
        serve_config(_serve_args("--config", str(path)), env).engine.store == "postgresql://env/db"
    )
    flagged = _serve_args("--config", str(path), "--store", "postgresql://flag/db")
    assert serve_config(flagged, env).engine.store == "postgresql://flag/db"
    interval = _serve_args("--config", str(path), "--retention-interval-seconds", "9")
    assert serve_config(interval, {}).engine.retention.interval_seconds == 9.0


def test_a_ranking_table_replaces_values_of_the_chosen_embedders_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, "[engine.ranking]\nmin_success = 0.7\n")
    config = serve_config(_serve_args("--config", str(path), "--embedder", "hashing"), {})
    expected = dataclasses.replace(default_ranking("hashing"), min_success=0.7)
    assert config.engine.ranking == expected
    assert expected.semantic_weight == 0.5  # the hashing family's own value stayed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[server]\nlisten_port = 1\n",
            r"unknown key server\.listen_port .*did you mean server\.listen",
        ),
        ("[engine]\nembedder = 3\n", r"engine\.embedder must be a string, got an integer$"),
        ("[engine]\nmax_code_bytes = 1.5\n", r"engine\.max_code_bytes must be an integer"),
        (
            "[engine]\nretention_in_background = 1\n",
            r"retention_in_background must be true or false",
        ),
        ("[engine.retention]\nmin_trys = 3\n", r"unknown key engine\.retention\.min_trys"),
        ("[engine]\nretention = 3\n", r"engine\.retention must be a table"),
        ("[stuff]\na = 1\n", r"unknown key stuff in the top level"),
        (
            '[engine]\nembedder = "bert"\n',
            r"pml\.toml: engine\.embedder must be one of minilm, hashing$",
        ),
        ("[engine]\nmax_code_bytes = 0\n", r"max_code_bytes\) must be >= 1, got 0"),
        ('[engine]\nstore = "postgresql://u:pw@h/db"\n', r"engine\.store carries a password"),
        ("[server\n", r"not valid TOML"),
        (
            "[engine]\nintent_duplicate_threshold = 85\n",
            r"engine\.intent_duplicate_threshold must be a cosine, -1 to 1, got 85",
        ),
        (
            "[engine]\ncapability_group_threshold = -1.5\n",
            r"engine\.capability_group_threshold must be a cosine, -1 to 1, got -1\.5",
        ),
        (
            "[engine]\nrequest_id_ttl_days = 0\n",
            r"pml\.toml: engine\.request_id_ttl_days must be > 0$",
        ),
        (
            "[engine]\nsnapshot_interval_seconds = -1\n",
            r"pml\.toml: engine\.snapshot_interval_seconds must be >= 0$",
        ),
        (
            "[engine]\nsession_idle_seconds = inf\n",
            r"engine\.session_idle_seconds must be a finite number, got inf",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        serve_config(_serve_args("--config", str(path)), environ={})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[engine]\nstore = {dsn = "postgresql://u:s3cret@h/db"}\n',
            "engine.store must be a string, got a table",
        ),
        ('[engine]\nstore = ["postgresql://u:s3cret@h/db"]\n', "must be a string, got an array"),
        ('[server]\ntls_key = {pem = "s3cret"}\n', "tls_key must be a path (string), got a table"),
        ('[server]\nkeys_file = ["s3cret"]\n', "keys_file must be a path (string), got an array"),
        ("[server]\npage_token_secret_file = 53237 \n", "must be a path (string), got an integer"),
    ],
)
def test_a_value_of_the_wrong_type_is_named_by_its_type_never_echoed(
    tmp_path: Path, text: str, message: str
) -> None:
    """A DSN with its password written as a table or an array by mistake was echoed whole in
    the error, which goes to a terminal and to logs. The key and the type are named; no value
    of the wrong type is repeated."""
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        serve_config(_serve_args("--config", str(path)), environ={})
    said = str(caught.value)
    assert said == f"{path}: {message}" or said.endswith(message), said
    assert "s3cret" not in said
    assert "53237" not in said


def test_pml_serve_exits_2_with_one_line_for_a_bad_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[engine]\nmax_tool_call = 4\n")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pml"), "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"pml serve: error: {path}: unknown key engine.max_tool_call in [engine] "
        "(did you mean engine.max_tool_calls?)"
    ]
    missing = subprocess.run(
        [str(Path(sys.executable).parent / "pml"), "serve", "--config", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "cannot read it" in missing.stderr


# (what --config names, its content; what the one line says after `pml serve: error: `)
HOSTILE_FILES = [
    (
        "pml.toml",
        b"[engine.retention]\nmin_tries = 0\n",
        "{path}: engine.retention.min_tries must be >= 1",
    ),
    (
        "pml.toml",
        b"[engine.ranking]\nmin_match = 5\n",
        "{path}: engine.ranking.min_match must be in [0, 1], got 5.0",
    ),
    (
        "pml.toml",
        b'[server]\nlog_level = "verbose"\n',
        "{path}: server.log_level must be one of debug, info, warning, error",
    ),
    (
        "pml.toml",
        b'[server]\nlog_format = "xml"\n',
        "{path}: server.log_format must be one of json, text",
    ),
    (
        "pml.toml",
        b'[engine]\ndata_dir = ""\n',
        "{path}: engine.data_dir is empty: leave it out for the default",
    ),
    (
        "pml.toml",
        b'[engine]\nstore = " "\n',
        "{path}: engine.store is empty: leave it out for the default",
    ),
    (
        "pml.toml",
        b"#" * (1024 * 1024 + 1),
        "{path}: larger than 1 MiB: no config file is (a file of every key is a few KB)",
    ),
    (
        "/dev/zero",
        None,
        "{path}: larger than 1 MiB: no config file is (a file of every key is a few KB)",
    ),
    ("dir", None, "{path}: cannot read it: Is a directory"),
    (
        "pml.toml",
        b"[server]\nmax_workers = 2\nmax_workers = 3\n",
        "{path}: not valid TOML: Cannot overwrite a value (at line 3, column 16)",
    ),
    (
        "pml.toml",
        b"[server\nmax_workers = 2\n",
        "{path}: not valid TOML: Expected ']' at the end "
        "of a table declaration (at line 1, column 8)",
    ),
    ("pml.toml", b"\xff\xfe[server]\n", "{path}: not UTF-8 text"),
    (
        "pml.toml",
        b"[server]\nmax_workers = 99999999999999999999\n",
        "{path}: server.max_workers must be at most 1024",
    ),
    (
        "pml.toml",
        b"[server]\nmax_workers = 1" + b"0" * 5000 + b"\n",
        "{path}: not valid TOML: Exceeds the limit (4300 digits) for integer string conversion: "
        "value has 5001 digits",
    ),
    (
        "pml.toml",
        b'[server]\nlissten = "x"\n',
        "{path}: unknown key server.lissten in [server] (did you mean server.listen?)",
    ),
]


@pytest.mark.parametrize(("name", "content", "said"), HOSTILE_FILES)
def test_a_hostile_config_file_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: bytes | None,
    said: str,
) -> None:
    """A choice the flag refuses was taken from the file (`log_level = "verbose"`: a
    ValueError traceback, exit 1; `log_format = "xml"`: served), an empty path was the working
    directory (a store written into it), `--config /dev/zero` took memory until killed, an
    integer of 5,001 digits was tomllib's ValueError traceback (exit 1)."""
    path = Path(name) if name.startswith("/") else tmp_path / name
    if content is not None:
        path.write_bytes(content)
    elif name == "dir":
        path.mkdir()
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", "--config", str(path), "--data-dir", str(tmp_path / "data")])
    assert (done.value.code, capsys.readouterr().err) == (
        2,
        f"pml serve: error: {said.format(path=path)}\n",
    )
    assert not (tmp_path / "data").exists()


def test_a_nested_tables_flag_refused_is_named_as_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A value `[engine.retention]` or `[engine.ranking]` refused was said by its Python class
    (`RetentionConfig.interval_seconds must be > 0`), naming neither the flag nor the key."""
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", "--retention-interval-seconds", "-1"])
    assert (done.value.code, capsys.readouterr().err) == (
        2,
        "pml serve: error: --retention-interval-seconds: engine.retention.interval_seconds "
        "must be > 0\n",
    )


@pytest.mark.parametrize("flag", ["--config", "--data-dir", "--keys-file", "--tls-cert"])
def test_a_path_flag_given_empty_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """`--data-dir ""` served a store written into the working directory; `--config ""` said
    `.: cannot read it`, naming no flag."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", flag, ""])
    assert done.value.code == 2
    assert capsys.readouterr().err.startswith(
        f"pml serve: error: argument {flag}: '' is empty: leave {flag} out for "
    )
    assert list(tmp_path.iterdir()) == []


def test_read_file_keeps_only_what_the_file_says(tmp_path: Path) -> None:
    path = _write(tmp_path, '[engine]\ndata_dir = "d"\n')
    assert read_file(path) == {"engine": {"data_dir": Path("d")}}


def test_config_of_routes_names_to_their_section() -> None:
    config = config_of(listen="127.0.0.1:0", embedder="hashing", max_code_bytes=10)
    assert (config.server.listen, config.engine.embedder) == ("127.0.0.1:0", "hashing")
    assert config.engine.limits.code.bound == 10
    with pytest.raises(TypeError, match="no setting"):
        config_of(interval_seconds=1.0)


def _record_code(target: str, size: int) -> grpc.StatusCode | None:
    """The status of recording code of `size` bytes beyond a valid start (None: taken)."""
    code = "await mcp.read_file({path: 'a.json'}) // " + "x" * size
    with PmlClient(target) as client:
        try:
            client.record(make_record("Read a JSON file", code, tools=["read_file"]))
        except PmlClientError as err:
            refused = err
        else:
            return None
    assert {field for field, _ in refused.violations} == {"record.code"}
    return refused.code


def _stop(proc: subprocess.Popen[str]) -> None:
    stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr[-5000:]


def test_pml_serve_config_starts_a_server_with_the_files_settings(tmp_path: Path) -> None:
    """Everything from the file: the listen address (port 0), the store, the embedder and a
    limit whose effect the API shows; then a flag overriding that limit."""
    path = _write(
        tmp_path,
        f'[server]\nlisten = "127.0.0.1:0"\nlog_level = "warning"\n'
        f'[engine]\ndata_dir = "{tmp_path / "data"}"\nembedder = "hashing"\n'
        'durability = "fast"\nmax_code_bytes = 1024\n',
    )
    proc, target = spawn_pml_serve("--config", str(path))
    try:
        assert _record_code(target, 2000) is grpc.StatusCode.INVALID_ARGUMENT
        assert _record_code(target, 500) is None
        with PmlClient(target) as client:
            assert client.server_info().embedding_dimension == HashingEmbedder().dim
    finally:
        _stop(proc)
    assert (tmp_path / "data").is_dir()
    proc, target = spawn_pml_serve("--config", str(path), "--max-code-bytes", "4096")
    try:
        assert _record_code(target, 2000) is None
    finally:
        _stop(proc)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--listen", "127.0.0.1:99999"], "server.listen: port 99999 is not 0..65535"),
        (["--listen", "127.0.0.1:-5"], "server.listen: port -5 is not 0..65535"),
        (["--listen", "127.0.0.1"], "server.listen: '127.0.0.1' is no host:port"),
        (["--listen", "127.0.0.1:"], "server.listen: port '' is not a number 0..65535"),
        (["--listen", "::1:50051"], "'::1:50051' is no host:port (an IPv6 host in brackets"),
        (["--otlp-http-listen", "127.0.0.1:abc"], "server.otlp_http_listen: port 'abc' is not"),
        (["--max-message-bytes", "99999999999"], "server.max_message_bytes must be at most"),
        (["--max-workers", "99999999999999999999"], "server.max_workers must be at most 1024"),
        (["--capture-workers", "1025"], "server.capture_workers must be at most 1024"),
        (["--grace-seconds", "nan"], "server.grace_seconds must be a finite number >= 0"),
        (["--grace-seconds", "-1"], "server.grace_seconds must be a finite number >= 0"),
        (["--stream-idle-seconds", "-1"], "server.stream_idle_seconds must be a finite number"),
        (["--keepalive-time-ms", "0"], "server.keepalive_time_ms must be 1.."),
        (["--metrics-port", "99999"], "server.metrics_port: port 99999 is not 0..65535"),
        (["--tenant-rate", "nan"], "server.tenant_rate must be a finite number > 0"),
        (["--tenant-rate", "-1"], "server.tenant_rate must be a finite number > 0"),
        (["--tenant-rate", "10", "--tenant-burst", "0"], "server.tenant_burst must be >= 1"),
        (["--tenant-max-in-flight", "0"], "server.tenant_max_in_flight must be >= 1"),
        (["--max-streams", "0"], "server.max_streams must be >= 1"),
        (["--otlp-pending-spans", "-1"], "server.otlp_pending_spans must be >= 0"),
        (["--recent-values-per-param", "-1"], "engine.recent_values_per_param must be >= 0"),
        (["--embedding-cache-bytes", "0"], "engine.embedding_cache_bytes must be >= 1"),
    ],
)
def test_server_values_grpc_cannot_use_are_refused_at_start(argv: list[str], words: str) -> None:
    """Each was taken: a port past 65535 (or negative) was bound modulo 65536 (`:99999` on
    34463), a huge message limit was an OverflowError traceback from grpc, `grace_seconds =
    nan` made SIGTERM fail before the store was closed, a negative idle time closed every
    stream 50 ms after it went quiet; a metrics port past 65535 was an OverflowError
    traceback, a burst of 0 refused every call for ever, a NaN rate failed naming no setting,
    and 0 for a limit with a computed default was silently that default; a negative count of
    held spans or recent values was taken as none, and said so nowhere. A listen address
    without a port was bound on 443, and a port that is no number ended in gRPC's log line or
    `invalid literal for int()`."""
    with pytest.raises(ConfigError) as refused:
        serve_config(_serve_args(*argv), environ={})
    assert words in str(refused.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["--session-idle-seconds", "inf"],
        ["--session-idle-seconds", "nan"],
        ["--request-id-ttl-days", "inf"],
        ["--request-id-ttl-days", "nan"],
        ["--snapshot-interval-seconds", "nan"],
        ["--backup-interval-seconds", "inf"],
        ["--intent-duplicate-threshold", "nan"],
        ["--capability-group-threshold", "inf"],
    ],
)
def test_engine_values_that_are_not_finite_are_refused_at_start(argv: list[str]) -> None:
    """Each was taken: `session_idle_seconds = inf` (a session that never goes idle) made the
    second step of every session an INTERNAL error, `request_id_ttl_days = inf` (keep the
    answers for ever) every retention run, on demand or in the background; `nan` did the same
    or silently turned a job off. The error leads with the flag that gave the value."""
    name = argv[0].removeprefix("--").replace("-", "_")
    with pytest.raises(ConfigError) as refused:
        serve_config(_serve_args(*argv), environ={})
    assert str(refused.value) == (
        f"{argv[0]}: engine.{name} must be a finite number, got {float(argv[1])!r}"
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--retention-interval-seconds", "1e10"],
            "--retention-interval-seconds: engine.retention.interval_seconds must be at",
        ),
        (["--snapshot-interval-seconds", "1e10"], "engine.snapshot_interval_seconds must be at"),
        (["--backup-interval-seconds", "1e10"], "engine.backup_interval_seconds must be at"),
    ],
)
def test_job_intervals_a_thread_cannot_wait_are_refused_at_start(
    argv: list[str], words: str
) -> None:
    """Each was taken (an interval of centuries, to run a job practically never): the job's
    thread died at once with an OverflowError traceback on stderr."""
    with pytest.raises(ConfigError) as refused:
        serve_config(_serve_args(*argv), environ={})
    assert words in str(refused.value)


@pytest.mark.parametrize("where", ["file", "PML_STORE", "flag"])
def test_a_store_that_is_no_dsn_is_named_where_it_was_given(tmp_path: Path, where: str) -> None:
    """A `store` that is no postgresql:// DSN names the layer that gave it: the file's key, the
    variable or the flag (before: always `--store must be a postgresql:// DSN`, from the
    engine's open, for a value that came from `$PML_STORE` or the file)."""
    path = _write(tmp_path, '[engine]\nstore = "mysql://db/pml"\n' if where == "file" else "")
    argv = ["--config", str(path), "--data-dir", str(tmp_path / "data")]
    argv += ["--store", "sqlite:pml.db"] if where == "flag" else []
    env = {"PML_STORE": "postgres-db.internal/pml"} if where == "PML_STORE" else {}
    expected = {
        "file": f"{path}: engine.store must be a postgresql:// DSN",
        "PML_STORE": "PML_STORE must be a postgresql:// DSN",
        "flag": "--store must be a postgresql:// DSN",
    }[where]
    with pytest.raises(ConfigError) as caught:
        serve_config(_serve_args(*argv), environ=env)
    assert str(caught.value).startswith(expected), caught.value
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://bob:Tr0ub%zzPW77x@127.0.0.1:1/db",  # a password libpq cannot decode
        "postgresql://bob:Tr0ubPW77x@127.0.0.1:1/db?Tr0ubPW77x=1",  # an unknown parameter
    ],
)
def test_a_dsn_libpq_cannot_read_is_refused_without_quoting_it(
    tmp_path: Path,
    dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A `PML_STORE` libpq cannot read passed the checks and failed the store's open with a
    traceback ending in libpq's message, which quotes the part it could not read: here the
    password (`invalid percent-encoded token: "Tr0ub%zzPW77x"`). It is one line naming the
    variable, quoting none of it (docs/operations.md, Secrets outside the store)."""
    monkeypatch.setenv("PML_STORE", dsn)
    argv = ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--embedder", "hashing"])
    err = capfd.readouterr().err
    assert "Tr0ub" not in err
    assert done.value.code == 2
    assert err.startswith("pml serve: error: PML_STORE is no DSN libpq reads: invalid "), err
    assert err.count("\n") == 1


def test_a_data_dir_of_bytes_that_are_not_utf8_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    """`--data-dir` holding bytes that are not UTF-8 (Python reads them as lone surrogates):
    the directory was made, then the store could not open it and the start said "Restore it
    from a backup". Refused naming the flag, exit 2, nothing made."""
    bad = str(tmp_path) + "/d\udcff"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "pml"),
            *("serve", "--listen", "127.0.0.1:0", "--embedder", "hashing", "--data-dir", bad),
        ],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    said = done.stderr.decode("utf-8", "backslashreplace")
    assert said.startswith("pml serve: error: --data-dir: engine.data_dir: the path ")
    assert "holds bytes that are not UTF-8 text" in said
    assert "Restore" not in said
    assert list(tmp_path.iterdir()) == []
