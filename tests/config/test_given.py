"""Every `PML_*` variable a command reads against its flag and its config file key, for every
command that reads it (docs/cli.md, "Flags, variables and the config file"): flag > variable >
file > default; a flag given wins without its variable being read (a variable no command could
use does not stop one that overrides it); a flag given empty is refused naming it; a variable
set empty, or to spaces, is unset. Each command is parsed by the real parser and resolved as
`pml` resolves it (`client_environment`, `serve_config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pml_server import cli
from pml_server.config import DEFAULT_LISTEN, ConfigError, serve_config, store_given

# Every command that talks to a server, with the arguments it cannot be parsed without.
CLIENT_COMMANDS: dict[str, list[str]] = {
    "record": [],
    "import": ["records.jsonl"],
    "suggest": ["x"],
    "list": [],
    "show": ["pat_1"],
    "delete": ["pat_1"],
    "failures": [],
    "retention": [],
    "stats": [],
    "mcp": [],
}

# (variable, flag, the namespace attribute it sets, its value with neither, a value the command
# would refuse if it read it)
CLIENT_SETTINGS = [
    ("PML_SERVER", "--server", "server", DEFAULT_LISTEN, ":99999"),
    ("PML_API_KEY", "--api-key", "api_key", None, "\x01"),
]

# (flag, variable, file): what each one gives, None when not given; what the command takes.
LAYERS = [
    (None, None, "file"),
    (None, "env", "env"),
    ("flag", None, "flag"),
    ("flag", "env", "flag"),
    ("flag", "UNUSABLE", "flag"),
    (None, "", None),
    (None, " \n", None),
]


@pytest.fixture
def resolve_client(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`pml COMMAND ... FLAGS` parsed and resolved with exactly these PML_* variables set."""

    def resolve(command: str, environ: dict[str, str], *flags: str) -> Any:
        for name in ("PML_SERVER", "PML_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        args = cli.build_parser().parse_args([command, *CLIENT_COMMANDS[command], *flags])
        return cli.client_environment(args)

    return resolve


@pytest.mark.parametrize("command", CLIENT_COMMANDS)
@pytest.mark.parametrize(("variable", "flag", "attribute", "default", "unusable"), CLIENT_SETTINGS)
@pytest.mark.parametrize(
    ("from_flag", "from_env", "taken"), [lay for lay in LAYERS if lay[2] != "file"]
)
def test_a_client_commands_flag_beats_its_variable_beats_the_default(
    resolve_client: Any,
    command: str,
    variable: str,
    flag: str,
    attribute: str,
    default: str | None,
    unusable: str,
    from_flag: str | None,
    from_env: str | None,
    taken: str | None,
) -> None:
    values = {"flag": "127.0.0.1:7001", "env": "127.0.0.1:7002", "UNUSABLE": unusable}
    environ = {} if from_env is None else {variable: values.get(from_env, from_env)}
    flags = [] if from_flag is None else [flag, values[from_flag]]
    args = resolve_client(command, environ, *flags)
    assert getattr(args, attribute) == (default if taken is None else values[taken])
    if attribute == "api_key" and taken is not None:  # what a refusal of the key names
        assert args.api_key_given == (flag if taken == "flag" else f"${variable}")


@pytest.mark.parametrize("command", CLIENT_COMMANDS)
@pytest.mark.parametrize("flag", ["--server", "--api-key"])
@pytest.mark.parametrize("value", ["", "  "])
def test_a_client_flag_given_empty_is_refused_naming_it(
    resolve_client: Any, command: str, flag: str, value: str
) -> None:
    """`--api-key ""` sent $PML_API_KEY (and `--api-key "$UNSET"` in a script the key of
    whoever ran it): an explicit flag wins over the environment, and an empty one is a mistake."""
    environ = {"PML_SERVER": "127.0.0.1:7002", "PML_API_KEY": "from-the-environment"}
    with pytest.raises(ConfigError, match=f"^{flag}: {value!r} is empty: leave {flag} out for "):
        resolve_client(command, environ, flag, value)


def test_a_client_flag_is_taken_without_the_spaces_around_it(resolve_client: Any) -> None:
    args = resolve_client("stats", {}, "--server", " 127.0.0.1:7001\n", "--api-key", " k\n")
    assert (args.server, args.api_key) == ("127.0.0.1:7001", "k")


@pytest.mark.parametrize(("from_flag", "from_env", "taken"), LAYERS)
@pytest.mark.parametrize("in_file", [True, False])
def test_pml_serves_store_flag_beats_pml_store_beats_the_file(
    tmp_path: Path, from_flag: str | None, from_env: str | None, taken: str | None, in_file: bool
) -> None:
    values = {
        "flag": "postgresql://flag.example/pml",
        "env": "postgresql://pml:secret@env.example/pml",  # a password: allowed in PML_STORE
        "file": "postgresql://file.example/pml",
        "UNUSABLE": "pml-data",  # no DSN: refused if read
    }
    argv = ["serve"]
    if in_file:
        path = tmp_path / "pml.toml"
        path.write_text(f'[engine]\nstore = "{values["file"]}"\n')
        argv += ["--config", str(path)]
    if from_flag is not None:
        argv += ["--store", values[from_flag]]
    environ = {} if from_env is None else {"PML_STORE": values.get(from_env, from_env)}
    args = cli.build_parser().parse_args(argv)
    if taken is None or (taken == "file" and not in_file):
        taken = "file" if in_file else None
    expected = None if taken is None else values[taken]
    assert serve_config(args, environ).engine.store == expected
    named = {"flag": "--store", "env": "PML_STORE", "file": f"{argv[-1]}: engine.store"}
    if taken is not None:
        assert store_given(args, environ) == named[taken]


@pytest.mark.parametrize("value", ["", " "])
def test_pml_serves_store_flag_given_empty_is_refused_naming_it(value: str) -> None:
    """`--store ""` was the embedded store, over a PML_STORE that named the shared one."""
    args = cli.build_parser().parse_args(["serve", "--store", value])
    with pytest.raises(ConfigError, match=r"^--store: .* is empty: leave --store out for "):
        serve_config(args, {"PML_STORE": "postgresql://env.example/pml"})


def test_pml_serve_reads_no_client_variable() -> None:
    """PML_SERVER and PML_API_KEY are the address and key of the client commands; `pml serve`
    listens where --listen (or server.listen) says."""
    args = cli.build_parser().parse_args(["serve"])
    environ = {"PML_SERVER": "127.0.0.1:7002", "PML_API_KEY": "k"}
    assert serve_config(args, environ).server.listen == DEFAULT_LISTEN


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["stats", "--tls-ca", ""], "argument --tls-ca: '' is empty: leave --tls-ca out for "),
        (["mcp", "--tls-cert", " "], "argument --tls-cert: ' ' is empty: leave --tls-cert out "),
        (["suggest", "x", "--tls-key", ""], "argument --tls-key: '' is empty: leave --tls-key "),
        (["record", "--file", ""], "argument --file: '' is empty: leave --file out for "),
        (["record", "--code-file", ""], "argument --code-file: '' is empty: leave --code-file "),
        (["import", ""], "argument file: '' is empty ("),
        (["keys", "list", "--keys-file", ""], "argument --keys-file: '' is empty ("),
        (["serve", "--data-dir", ""], "argument --data-dir: '' is empty: leave --data-dir out "),
    ],
)
def test_a_path_given_empty_is_refused_naming_its_flag(
    argv: list[str],
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty path was the working directory: `pml stats --tls-ca ""` said `.: Is a
    directory`, naming no flag, `pml serve --data-dir ""` wrote its store there."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.startswith(f"pml {' '.join(argv[: 2 if argv[0] == 'keys' else 1])}: error: {said}")
    assert list(tmp_path.iterdir()) == []
