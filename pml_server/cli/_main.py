"""The `pml` command: `serve` runs the server; every other command talks to one through
`pml_server.client` (`--server`, `--api-key` or the PML_SERVER / PML_API_KEY variables)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from pml_server.cli._interrupt import hand_over
from pml_server.config import (
    DEFAULT_LISTEN,
    ConfigError,
    NotBlank,
    add_serve_flags,
    check_keys_file,
    given,
    listen_problem,
    serve_config,
    store_given,
)
from pml_server.domain.limits import LIMITS

Handler = Callable[[argparse.Namespace], int]


EXIT_CODES = """exit codes:
  0  done
  1  the server refused the call (the gRPC status and the fields it named are
     printed)
  2  bad usage or input: a flag, a missing or unreadable file, a record that is
     not valid JSON (pml serve: a configuration it cannot start with, a port or
     data dir in use)
  3  no server answered (unreachable, or it did not answer in time)
  4  done, but not everything was taken: `record` was rejected (tool failures),
     or `import` had rejected or refused records
  130, 143  `import` stopped by SIGINT (Ctrl-C) or SIGTERM: its summary says
     what the server acknowledged (stored) before it stopped
  141  the reader of the output went away (piped into `head`), as SIGPIPE ends
     a program"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Adds the default to every flag's help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and action.option_strings
            and default not in (None, False, [], "", argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


_INT32 = 2**31 - 1


def _integer(text: str) -> int:
    """An integer flag's value; argparse said a value that is none by the name of the parsing
    function (`invalid _suggestions value: 'abc'`)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _int32(text: str) -> int:
    """A count sent in an int32 request field (`page_size`, `plan_size`): the server names a
    value out of its own range; one no int32 holds cannot even be sent."""
    value = _integer(text)
    if not -_INT32 - 1 <= value <= _INT32:
        raise argparse.ArgumentTypeError(f"{text} is not a 32-bit integer")
    return value


def _suggestions(text: str) -> int:
    """`-k`: 0 (the server's default) up to Suggest's bound; the server would name the value
    by its request field, `page_size`, which the command line does not have."""
    value = _integer(text)
    if not 0 <= value <= LIMITS.suggestions.bound:
        raise argparse.ArgumentTypeError(f"{text} is not in 0..{LIMITS.suggestions.bound}")
    return value


def positive_count(text: str) -> int:
    """A count of at least 1: `--limit`, how many items to print (0 printed one item, a
    negative number was sent on as a page size the server refused, naming a field the command
    line has not); `pml mcp --max-tool-calls`."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a count >= 1")
    return value


def _client_flags(p: argparse.ArgumentParser) -> None:
    # Environment defaults are resolved at call time, so `--help` never prints a key.
    p.add_argument(
        "--server", help=f"host:port of the pml server (default: $PML_SERVER or {DEFAULT_LISTEN})"
    )
    p.add_argument("--api-key", help="API key (default: $PML_API_KEY; none: single-tenant server)")
    p.add_argument("--tls", action="store_true", help="use TLS with the system roots")
    # An empty path was the working directory (`.: Is a directory`, naming no flag).
    p.add_argument(
        "--tls-ca",
        type=NotBlank(Path, "--tls-ca", "the system's roots"),
        help="CA that signed the server certificate",
    )
    p.add_argument(
        "--tls-cert",
        type=NotBlank(Path, "--tls-cert", "no client certificate"),
        help="client certificate (mutual TLS)",
    )
    p.add_argument(
        "--tls-key",
        type=NotBlank(Path, "--tls-key", "no client certificate"),
        help="client key (mutual TLS)",
    )


# The client parameter each TLS flag of `_client_flags` sets: a refusal naming the parameter
# is said naming the flag.
_TLS_FLAGS = {
    "root_certificates": "--tls-ca",
    "client_cert": "--tls-cert",
    "client_key": "--tls-key",
}


def client_refusal(
    args: argparse.Namespace, message: str, violations: list[tuple[str, str]]
) -> str:
    """What to print of a client refusal made before any call (a PmlClientError's message and
    violations): a TLS parameter's is said with its flag, the API key's with what the user
    set (`--api-key` or `$PML_API_KEY`, as `client_environment` read it), never the client's
    parameter name."""
    flags = {**_TLS_FLAGS, "api_key": getattr(args, "api_key_given", "--api-key")}
    if len(violations) != 1 or violations[0][0] not in flags:
        return message
    name, description = violations[0]
    if description.startswith("needs "):
        wanted, _, rest = description.removeprefix("needs ").partition(":")
        description = f"needs {flags.get(wanted, wanted)}:{rest}"
    return f"{flags[name]} {description}"


def _client_command_flags(p: argparse.ArgumentParser) -> None:
    """A command that prints pml's replies: the connection's flags and `--json` (not `pml
    mcp`'s, whose output is the MCP protocol)."""
    _client_flags(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print the reply as JSON (proto field names) instead of text; errors too, on stderr",
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pml-server")
    except PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """`--version`, looked up only when asked: importlib.metadata costs every other command
    ~80 ms of startup (`pml import` is timed as a whole process)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"pml {_version()}")
        parser.exit()


def _keys_parsers(commands: Any) -> None:
    keys = commands.add_parser(
        "keys", help="manage the API keys file", formatter_class=_HelpFormatter
    )
    actions = keys.add_subparsers(dest="keys_action", required=True, metavar="{add,list,revoke}")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, formatter_class=_HelpFormatter
        )
        sub.add_argument(
            "--keys-file",
            type=NotBlank(Path, "--keys-file", None),
            required=True,
            help="the keys file (JSON)",
        )
        return sub

    add = action("add", "create a key for a tenant and print it once (only its hash is stored)")
    add.add_argument("--tenant", required=True, help="the tenant the key acts for")
    add.add_argument(
        "--role", choices=["read", "write", "admin"], default="write", help="what the key may do"
    )
    add.add_argument("--label", default="", help="a note for `keys list` (who or what uses it)")
    listing = action("list", "the keys: id, tenant, role, label (never the keys themselves)")
    listing.add_argument("--json", action="store_true", help="print the keys as JSON")
    revoke = action("revoke", "remove a key; a running server drops it within a second")
    revoke.add_argument("id", help="the key's id from `keys list` (or the key itself)")


class _Parser(argparse.ArgumentParser):
    """A flag it cannot take is one line naming it, exit 2 (docs/cli.md, Exit codes): argparse
    printed the whole usage first, 30 lines for `pml serve`, burying the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the flags)\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        """An argument that is not UTF-8 text (a byte of another encoding, which Python reads
        as a surrogate) is refused naming it, exit 2 (docs/cli.md, Exit codes): sent, it was a
        UnicodeEncodeError traceback. A path is not text: a file name may be any bytes. A
        command's arguments are its own parser's to check; the API key has its own rule
        (printable ASCII), said alike for `--api-key` and `$PML_API_KEY` (`client_refusal`)."""
        is_path = isinstance(action.type, NotBlank) and action.type.kind is Path
        if not is_path and action.nargs != argparse.PARSER and action.dest != "api_key":
            from pml_client.client import text_problem  # grpc: only once there are arguments

            if (problem := text_problem(arg_string)) is not None:
                raise argparse.ArgumentError(action, problem)
        return super()._get_value(action, arg_string)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pml",
        description="pml: procedural memory for agents",
        epilog=EXIT_CODES,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_flags(
        commands.add_parser(
            "serve", help="run the gRPC server", epilog=EXIT_CODES, formatter_class=_HelpFormatter
        )
    )
    _keys_parsers(commands)

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXIT_CODES,
            formatter_class=_HelpFormatter,
        )
        _client_command_flags(sub)
        return sub

    rec = client("record", "record one execution (from flags or a JSON file)")
    rec.add_argument(
        "--file",
        type=NotBlank(Path, "--file", "a record of the flags"),
        help="an ExecutionRecord as proto JSON",
    )
    rec.add_argument("--intent", help="what the agent was asked to do")
    rec.add_argument("--code", help="the code that ran; or --code-file")
    rec.add_argument(
        "--code-file",
        type=NotBlank(Path, "--code-file", "--code"),
        help="read the code from this file",
    )
    rec.add_argument("--language", default="typescript", help="language of the code")
    rec.add_argument(
        "--tool", action="append", default=[], help="a succeeded tool call, in order (repeat)"
    )
    # Two values, not one `TOOL:ERROR`: a tool name may hold any character, colons included
    # (`github:create_issue`, a URL: docs/capture.md, rule 4), and so may an error.
    rec.add_argument(
        "--failed-tool",
        action="append",
        default=[],
        nargs=2,
        metavar=("TOOL", "ERROR"),
        help="a failed tool call and its error, after the succeeded ones (repeat); two "
        "values, as `--failed-tool github:create_issue 'rate limited: retry'`",
    )
    rec.add_argument(
        "--request-id",
        default="",
        help="idempotency key, also over a --file record's (default: the --file record's, "
        "else a fresh UUID per call)",
    )
    rec.add_argument("--duration-ms", type=float, default=0.0, help="how long the execution took")
    rec.add_argument(
        "--session",
        type=NotBlank(str, "--session", "no session"),
        metavar="ID",
        help="the agent session it belongs to: pml learns which step follows which "
        "(docs/ranking.md, Sessions)",
    )

    imp = client("import", "upload a JSONL file of ExecutionRecords over the stream")
    imp.add_argument(
        "file",
        type=NotBlank(Path, "file", None),
        help="one ExecutionRecord in proto JSON per line",
    )
    imp.add_argument(
        "--strict",
        action="store_true",
        help="check every line first and send nothing if one is not an ExecutionRecord",
    )

    sug = client("suggest", "ranked suggestions with score parts")
    sug.add_argument(
        "intent",
        nargs="?",
        default="",
        help="what the agent wants to do (may be left out with --session or --after: then "
        "what usually comes next)",
    )
    sug.add_argument(
        "-k",
        type=_suggestions,
        default=0,
        help=f"how many, 1..{LIMITS.suggestions.bound} (0: the server's 5)",
    )
    sug.add_argument("--min-match", type=float, help="minimum match, 0..1 (default: server's)")
    sug.add_argument(
        "--min-success", type=float, help="minimum success estimate, 0..1 (default: server's)"
    )
    sug.add_argument(
        "--tools", help="comma-separated tools available now, e.g. 'a, b' (default: any)"
    )
    sug.add_argument(
        "--available-tool",
        action="append",
        default=None,
        help="a tool available now (repeat; with --tools: both); only patterns using "
        "available tools are retrieved (docs/ranking.md, Context filters)",
    )
    sug.add_argument(
        "--tag", action="append", default=[], help="only patterns with this tag (repeat)"
    )
    sug.add_argument(
        "--include-flagged", action="store_true", help="include patterns flagged for removal"
    )
    sug.add_argument("--explain", action="store_true", help="also show filtered-out candidates")
    sug.add_argument(
        "--session",
        type=NotBlank(str, "--session", "no session"),
        metavar="ID",
        help="the session the agent's steps were recorded under (pml record --session): what "
        "usually follows its last step ranks higher (docs/ranking.md, Sessions)",
    )
    sug.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="TOOL",
        help="a tool of the agent's previous step, in call order (repeat)",
    )
    sug.add_argument(
        "--after-pattern",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a pattern the agent just ran (repeat; the last one counts)",
    )
    sug.add_argument(
        "--plans",
        type=_int32,
        default=None,
        metavar="N",
        help="most plans composed of several capabilities, 0..10 (default: 3; 0: none)",
    )

    lst = client("list", "list patterns (or capabilities)")
    # one listing: `--capabilities --capability X` listed the capabilities, X dropped
    listing = lst.add_mutually_exclusive_group()
    listing.add_argument("--capabilities", action="store_true", help="list capabilities instead")
    listing.add_argument(
        "--capability",
        type=NotBlank(str, "--capability", "every pattern"),
        metavar="NAME",
        help="only the patterns of this capability (capabilities/ID or cap_...)",
    )
    lst.add_argument("--limit", type=positive_count, default=100, help="at most this many")

    show = client("show", "show a pattern or capability")
    bare = "patterns/ID, capabilities/ID, or a bare id as pml list prints it (pat_... or cap_...)"
    show.add_argument("name", help=bare)
    delete = client("delete", "delete a pattern or capability")
    delete.add_argument("name", help=bare)
    fails = client("failures", "the failure log, newest first")
    fails.add_argument(
        "--limit",
        type=positive_count,
        default=50,
        help=f"at most this many (1..{LIMITS.page_size.bound})",
    )
    ret = client("retention", "run the retention policy (dry run unless --apply)")
    ret.add_argument("--apply", action="store_true", help="apply it (admin role)")
    client("stats", "counts of this tenant's data")

    from pml_server.mcp import cli as mcp_cli

    mcp_cli.add_parser(commands, _client_flags)
    return parser


def client_environment(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> argparse.Namespace:
    """The one place every client command (`pml suggest`, `record`, `import`, `mcp`...) reads
    its environment: `--server`, else $PML_SERVER, else the default address; `--api-key`, else
    $PML_API_KEY, else no key, by the rule of `config.given` (a flag given empty is refused, a
    variable set empty is unset). Resolved after parsing, so `--help` never prints a key. An
    address that is no host:port raises UsageError naming where it was given (gRPC tried
    `:99999` as port 34463 and `localhost` alone as port 443, and the command said no server
    answered)."""
    if hasattr(args, "server"):
        server, where = given(args.server, "--server", "PML_SERVER", _NO_SERVER, environ)
        args.server = server or DEFAULT_LISTEN
        if server is not None and (problem := listen_problem(server)) is not None:
            raise UsageError(f"{_named(where)}: {problem}")
        args.api_key, where = given(args.api_key, "--api-key", "PML_API_KEY", _NO_KEY, environ)
        args.api_key_given = _named(where)
    return args


_NO_SERVER = f"$PML_SERVER, else {DEFAULT_LISTEN}"
_NO_KEY = "$PML_API_KEY, else no key (an empty PML_API_KEY is none)"


def _named(where: str) -> str:
    """A variable as the client commands name it, `$PML_SERVER`; a flag as it is."""
    return where if where.startswith("--") else f"${where}"


class UsageError(Exception):
    """A flag or variable no command can run with (exit 2, one line)."""


_STANDARD_STREAMS = ((0, "stdin", "standard input"), (1, "stdout", "standard output"))


def _reopen_closed_streams() -> list[str]:
    """The standard streams the caller closed (`pml stats >&-`, `pml mcp <&-`), each now open
    on /dev/null: no file or socket pml opens later takes its number and gets its output, and
    no print meets `None` (a traceback). Standard error is reopened unnamed: nothing to say
    it on."""
    closed = []
    for fd, attribute, name in (*_STANDARD_STREAMS, (2, "stderr", "")):
        if getattr(sys, attribute) is not None:
            continue
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, attribute, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115
        if name:
            closed.append(name)
    return closed


def _streams_needed(args: argparse.Namespace) -> set[str]:
    """What a command cannot run without (docs/cli.md, Exit codes): every command but `pml
    serve` prints its answer (`keys add` the only copy of a new key); `pml mcp` over stdio
    also reads its client's requests."""
    if args.command == "serve":
        return set()
    if args.command == "mcp" and args.transport != "http":
        return {"standard input", "standard output"}
    return {"standard output"}


def main(argv: list[str] | None = None) -> None:
    """`pml`: a command Ctrl-C stopped before it had its own handler (`pml serve` while it
    opens the store, a client waiting for its answer) ends as SIGINT ends a program, 130,
    without a traceback (docs/cli.md, Exit codes); one while it was still importing was ended
    so by `_interrupt`."""
    try:
        hand_over()
        _main(argv)
    except KeyboardInterrupt:
        sys.stderr.write("\n")  # the shell's prompt starts on a line of its own after `^C`
        sys.exit(128 + signal.SIGINT)


def _main(argv: list[str] | None) -> None:
    closed = _reopen_closed_streams()
    args = build_parser().parse_args(argv)
    try:
        client_environment(args)
        if missing := [name for name in closed if name in _streams_needed(args)]:
            verb, it = ("is", "it") if len(missing) == 1 else ("are", "them")
            raise UsageError(f"{' and '.join(missing)} {verb} closed: give {it} /dev/null instead")
    except (UsageError, ConfigError) as err:
        if getattr(args, "json", False):  # errors in JSON too (docs/cli.md, Output)
            print(json.dumps({"error": {"message": str(err)}}, ensure_ascii=False), file=sys.stderr)
        else:
            print(f"pml {args.command}: error: {err}", file=sys.stderr)
        sys.exit(2)
    if args.command == "serve":
        sys.exit(_serve(args))
    if args.command == "keys":
        sys.exit(_keys(args))
    if args.command == "mcp":
        from pml_server.mcp import cli as mcp_cli

        sys.exit(mcp_cli.run(args))
    from pml_server.cli._commands import run

    sys.exit(run(args))


def _keys(args: argparse.Namespace) -> int:
    from pml_server.api.security.auth import Role, add_key, list_keys, revoke_key
    from pml_server.cli._commands import output_closed

    try:
        if args.keys_action == "add":
            key = add_key(args.keys_file, args.tenant, Role.parse(args.role), args.label)
            print(f"API key for tenant {args.tenant} ({args.role}); shown once, store it now:")
            print(key)
        elif args.keys_action == "list":
            entries = list_keys(args.keys_file)
            if args.json:
                print(json.dumps({"keys": [vars(e) for e in entries]}, indent=2))
            elif not entries:
                print(f"no keys in {args.keys_file}")
            else:
                from pml_server.cli._render import one_line

                for e in entries:  # a label is free text: one line, no terminal escape
                    label = f"  {one_line(e.label)}" if e.label else ""
                    print(f"{e.id}  {e.tenant}  {e.role}{label}")
        else:
            e = revoke_key(args.keys_file, args.id)
            print(f"revoked {e.id} ({e.tenant}, {e.role}); a running server drops it within 1 s")
        sys.stdout.flush()
    except BrokenPipeError:
        return output_closed()
    except OSError as err:  # a directory, a folder that does not exist: the flag named
        print(
            f"pml keys: error: --keys-file {args.keys_file}: {err.strerror or err}", file=sys.stderr
        )
        return 2
    except (ValueError, KeyError) as err:
        print(f"pml keys: error: {err}", file=sys.stderr)
        return 2
    return 0


def _serve(args: argparse.Namespace) -> int:
    from pml_server.api import logs
    from pml_server.api.server import serve_forever

    try:
        config = serve_config(args)
        check_keys_file(config, args)
    except ConfigError as err:
        print(f"pml serve: error: {err}", file=sys.stderr)
        return 2
    logs.configure(config.server.log_level, json_format=config.server.log_format == "json")
    from pml_server.domain.errors import FailedPreconditionError

    try:
        serve_forever(config)
    except (ValueError, OSError, FailedPreconditionError) as err:  # e.g. a store of another model
        message = str(err)
        if config.engine.store is not None:
            from pml_server.storage.postgres import StoreUnreachableError

            if isinstance(err, StoreUnreachableError):  # a login refused, no database there
                message = f"{store_given(args)}: {message}"
        print(f"pml serve: error: {message}", file=sys.stderr)
        return 2
    return 0
