"""The client-side `pml` commands: each builds a `PmlClient`, calls it and renders the reply as
text (`_render`, fitted to the terminal's width) or, with `--json`, as proto JSON.

Errors end in one line on stderr and an exit code from `cli.EXIT_CODES`: no tracebacks for a
refused call, an unreachable server or a bad input file."""

from __future__ import annotations

import argparse
import codecs
import json
import re
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from pml_client import pml_pb2, resources_pb2
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pml_server.cli import _render as render
from pml_server.cli._record_json import parse_execution_record
from pml_server.client import (
    CertificateError,
    ClientCertificateError,
    PmlClient,
    PmlClientError,
    TlsMismatchError,
    make_record,
)
from pml_server.domain.limits import LIMITS
from pml_server.domain.stdout import stdout_to_devnull

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_TAKEN = 4
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE  # docs/cli.md, exit codes
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class InputError(Exception):
    """A file or flag the command cannot use (exit 2)."""


class _Interrupted(BaseException):
    """SIGINT or SIGTERM during an import: the command stops and says what was acknowledged.
    A BaseException, as KeyboardInterrupt is: nothing on the way may take it for an error."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise `_Interrupted` in the main thread while the block runs. A
    signal the caller set to be ignored (a shell's background job ignores SIGINT) stays
    ignored."""

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise _Interrupted(signum)

    previous: dict[signal.Signals, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit 1 (the code of a refused call): `run` says which it is instead.
        raise BrokenPipeError


def _console() -> Console:
    # Made per command, so the width follows the terminal (or $COLUMNS) at call time.
    return _Console()


def output_closed() -> int:
    """The reader of stdout went away (`pml list | head -1`): nothing more is said, to anyone,
    and the exit code says so, as a program that SIGPIPE ended (docs/cli.md, exit codes).
    stdout now writes to /dev/null, so the interpreter's last flush cannot fail again."""
    stdout_to_devnull()
    return EXIT_OUTPUT_CLOSED


def _as_json(message: Message) -> Any:
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _client(args: argparse.Namespace) -> PmlClient:
    try:
        return PmlClient(
            args.server,  # resolved with the environment by `cli.client_environment`
            api_key=args.api_key,
            tls=args.tls,
            root_certificates=args.tls_ca,
            client_cert=args.tls_cert,
            client_key=args.tls_key,
        )
    except PmlClientError as err:  # an API key that cannot be sent, TLS files that cannot serve
        from pml_server.cli._main import client_refusal

        raise InputError(client_refusal(args, err.message, err.violations)) from None


# json_format's own words for a JSON array are Python's ("unhashable type: 'dict'")
_NOT_AN_OBJECT = "not a JSON object: a record is one JSON object (an array of them is not)"
_NOT_A_LINE_OBJECT = (
    "the line is not a JSON object: a file to import holds one ExecutionRecord object a line "
    "(JSON Lines), not an array of them nor one record over several lines"
)


def _read_text(path: Path) -> str:
    # UTF-8 whatever the locale; a byte order mark, as some Windows editors write it, read past
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not UTF-8 text: {err.reason}") from None


def _parse_record(text: str, where: str) -> resources_pb2.ExecutionRecord:
    if not text.lstrip().startswith("{"):
        raise InputError(f"{where}: not an ExecutionRecord: {_NOT_AN_OBJECT}")
    try:
        return json_format.Parse(text, resources_pb2.ExecutionRecord())
    except json_format.ParseError as err:
        # protobuf's message names the field, then lists every field on a second line.
        reason = str(err).splitlines()[0] if str(err) else "not valid"
        raise InputError(f"{where}: not an ExecutionRecord: {reason}") from None


def _capture_exit(result: resources_pb2.CaptureResult) -> int:
    rejected = result.outcome == resources_pb2.CAPTURE_OUTCOME_REJECTED
    return EXIT_NOT_TAKEN if rejected else EXIT_OK


def record(args: argparse.Namespace) -> int:
    if args.file is not None:
        rec = _parse_record(_read_text(args.file), str(args.file))
    else:
        code = _read_text(args.code_file) if args.code_file else args.code
        if args.intent is None or code is None:
            raise InputError("give --intent and --code (or --code-file), or --file")
        failed = [(tool, error or "failed") for tool, error in args.failed_tool]
        rec = make_record(
            args.intent,
            code,
            args.language,
            tools=args.tool,
            failed_tools=failed,
            request_id=args.request_id,
            duration_ms=args.duration_ms,
            session_id=args.session or "",
        )
    if args.session:  # also over a --file record's own
        rec.session_id = args.session
    if args.request_id:  # also over a --file record's own
        rec.request_id = args.request_id
    elif not rec.request_id:  # a --file record without one, as `make_record` gives
        rec.request_id = str(uuid.uuid4())
    with _client(args) as client:
        result = client.record(rec)
    if args.json:
        _print_json(_as_json(result))
    else:
        render.capture(_console(), render.printable(result))
    return _capture_exit(result)


def _jsonl_records(
    path: Path, bad: Callable[[int, str], None]
) -> Iterator[tuple[int, resources_pb2.ExecutionRecord]]:
    """(line number, record) of each non-empty line of `path`, read a line at a time; a line
    that is not an ExecutionRecord goes to `bad` and is skipped. Parsed as json_format.Parse
    parses it, errors included, faster (`_record_json`: this is client CPU the server loses)."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            if number == 1:  # a byte order mark, as some Windows editors write it
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if not raw.strip():
                continue
            if not raw.lstrip().startswith(b"{"):
                bad(number, _NOT_A_LINE_OBJECT)
                continue
            try:
                line = raw.decode("utf-8")
                yield number, parse_execution_record(line)
            except (json_format.ParseError, UnicodeDecodeError) as err:
                bad(number, str(err).splitlines()[0][:300])


def _nonempty_lines(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for raw in lines if raw.strip())


def import_file(args: argparse.Namespace) -> int:
    """`pml import FILE`: stream a JSONL file of ExecutionRecords over StreamTraces, with a
    progress bar and a summary counting each record once (saved / counted / rejected /
    refused, replays among them, bad lines, executions/s); `--json` prints the summary as JSON."""
    console = _console() if not args.json else Console(stderr=True, quiet=True)
    # The bar and the bad-line errors share one stderr console: an error printed while the bar
    # is live goes above it, never onto its line.
    errors = Console(stderr=True)
    path: Path = args.file
    if not path.is_file():
        # The file is read twice (counted, then uploaded): a pipe or device cannot be.
        if not path.exists():
            why = "no such file"
        elif path.is_dir():
            why = "it is a directory"
        else:
            why = "not a regular file (import reads it twice: write it to a file first)"
        raise InputError(f"cannot read {path}: {why}")
    bad_lines: list[int] = []
    bar: list[Callable[[], None]] = []  # moves the progress bar on, once it exists

    def report_bad(number: int, why: str) -> None:
        bad_lines.append(number)
        for move in bar:  # a bad line is done with too: the bar reaches 100% at the end
            move()
        if len(bad_lines) <= _BAD_LINES_SHOWN:
            errors.print(
                f"[red]error[/] {path}:{number}: not an ExecutionRecord: {_sentence(why)}",
                markup=True,
                highlight=False,
            )
        elif len(bad_lines) == _BAD_LINES_SHOWN + 1:
            errors.print(
                f"[red]error[/] {path}: more bad lines; only the first {_BAD_LINES_SHOWN} are "
                "shown, the summary counts them all (--json lists their numbers).",
                markup=True,
                highlight=False,
            )

    # One quick pass counts the lines for the progress bar (and, with --strict, checks them all
    # before anything is sent); the upload then reads the file again, a line at a time. Without
    # --strict the pass only counts non-empty lines: parsing every record twice took client
    # CPU from the server on a 2-core machine (a bad line then shows as a step never taken).
    if args.strict:
        total = sum(1 for _ in _jsonl_records(path, report_bad))
    else:
        total = _nonempty_lines(path)
    if args.strict and bad_lines:
        raise InputError(f"{path}: {len(bad_lines)} bad lines: nothing was sent (--strict)")
    bad_lines.clear()
    outcomes: Counter[str] = Counter()
    refused: list[tuple[str, str]] = []
    columns = (
        TextColumn("importing"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )

    minted_ids = 0  # records read that had no request_id and got a fresh one

    def pairs() -> Iterator[tuple[str, resources_pb2.ExecutionRecord]]:
        nonlocal minted_ids
        for number, record in _jsonl_records(path, report_bad):
            if not record.request_id:  # stays the same if the stream must be resent
                record.request_id = str(uuid.uuid4())
                minted_ids += 1
            yield f"line-{number}", record  # unique even when request ids repeat

    start = time.perf_counter()
    progress = Progress(*columns, console=errors, disable=args.json)
    with _client(args) as client, progress:
        task = progress.add_task("import", total=total)
        bar.append(lambda: progress.advance(task))

        def on_ack(ack: pml_pb2.StreamTracesResponse) -> None:
            if ack.HasField("error"):
                outcomes["refused"] += 1
                if len(refused) < 20:
                    refused.append((ack.execution_id, ack.error.message))
            elif ack.result.replayed:
                # Applied before (its first outcome is in the reply): nothing saved or counted
                # now, so it is counted as replayed only.
                outcomes["replayed"] += 1
            else:
                name = render.enum_label(
                    resources_pb2.CaptureOutcome.Name, ack.result.outcome, "CAPTURE_OUTCOME_"
                )
                outcomes[name.lower()] += 1
            progress.advance(task)

        interrupted: int | None = None  # the signal that stopped the upload
        reconnects: int | None = None
        try:
            with _signals_interrupt():
                reconnects = client.upload_pairs(pairs(), on_ack=on_ack, keep_acks=False).reconnects
        except _Interrupted as stop:
            # Leaving the client's block cancels the stream; what the server acknowledged is
            # stored, and what it was sent but did not acknowledge may or may not be.
            interrupted = stop.signum
        if interrupted is None:
            # Every line was answered or skipped; the bar ends full even if the counting pass
            # and the upload disagreed (a file that changed in between).
            progress.update(task, completed=total)
    elapsed = time.perf_counter() - start
    answered = sum(outcomes.values())
    rate = answered / elapsed if elapsed > 0 else 0.0
    if args.json:
        summary: dict[str, Any] = {
            "records": answered,
            "outcomes": dict(sorted(outcomes.items())),
            "bad_lines": bad_lines,
            "executions_per_second": round(rate, 1),
            "reconnects": reconnects,
            "refused": [{"execution_id": e, "message": m} for e, m in refused],
        }
        if interrupted is not None:
            summary["interrupted_by"] = signal.Signals(interrupted).name
            summary["records_without_request_id"] = minted_ids
        _print_json(summary)
    else:
        parts = [f"{outcomes[k]} {k}" for k in _SUMMARY_KEYS]
        if outcomes["replayed"]:
            parts[-1] += " (applied before, by request id: nothing counted twice)"
        parts += [f"{n} {k}" for k, n in sorted(outcomes.items()) if k not in _SUMMARY_KEYS]
        if bad_lines:
            parts.append(f"{len(bad_lines)} bad lines skipped")
        if interrupted is None:
            console.print(
                f"imported {answered} records from {path}: {', '.join(parts)}; "
                f"{rate:.1f} executions/s; reconnects: {reconnects}.",
                highlight=False,
            )
        else:
            console.print(
                f"interrupted by {signal.Signals(interrupted).name}: {answered} of {total} "
                f"records from {path} acknowledged: {', '.join(parts)}; {rate:.1f} executions/s.",
                highlight=False,
            )
            console.print(_resume_advice(minted_ids))
        for eid, message in refused[:20]:
            console.print(f"  [red]refused[/] {eid}: {_sentence(message)}", highlight=False)
    if interrupted is not None:
        return 128 + interrupted  # the shell's convention for a process a signal stopped
    if refused or outcomes["rejected"]:
        return EXIT_NOT_TAKEN
    return EXIT_USAGE if bad_lines else EXIT_OK


_SUMMARY_KEYS = ("saved", "counted", "rejected", "refused", "replayed")


def _sentence(text: str) -> str:
    """`text` ending in exactly one period (a parser's message may end in one, or several)."""
    return text.rstrip().rstrip(".") + "."


# A file of another format has every line bad: its errors must not bury the summary.
_BAD_LINES_SHOWN = 20


def _resume_advice(minted_ids: int) -> str:
    """What importing the file again does after an interruption: the server applies a request
    id once, so only records that came without one can count twice."""
    if minted_ids == 0:
        return (
            "every record read had a request_id: importing the file again applies each record once."
        )
    return (
        f"{minted_ids} of the records read had no request_id and got a fresh one: importing "
        "the file again would count those of them already applied a second time."
    )


def suggest(args: argparse.Namespace) -> int:
    # "read_file, parse_json" offers parse_json, not " parse_json" (a tool no pattern uses)
    listed = args.tools.split(",") if args.tools is not None else None
    tools = [t.strip() for t in listed if t.strip()] if listed is not None else None
    if args.available_tool is not None:
        tools = [*(tools or []), *args.available_tool]
    with _client(args) as client:
        reply = client.suggest(
            args.intent,
            args.k,
            min_match=args.min_match,
            min_success=args.min_success,
            available_tools=tools,
            tags=args.tag,
            include_flagged=args.include_flagged,
            explain=args.explain,
            plan_size=args.plans,
            session_id=args.session or "",
            previous_patterns=args.after_pattern,
            previous_tools=args.after,
        )
    if args.json:
        _print_json(_as_json(reply))
    else:
        render.suggestions(
            _console(),
            render.printable(reply),
            explain=args.explain,
            intent=args.intent,
            no_tools=tools == [],
        )
    return EXIT_OK


def list_items(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.capabilities:
            caps = []
            for c in client.iter_capabilities():
                caps.append(c)
                if len(caps) >= args.limit:
                    break
            if args.json:
                _print_json({"capabilities": [_as_json(c) for c in caps]})
            else:
                render.capabilities(_console(), [render.printable(c) for c in caps])
        else:
            pats = []
            capability = _capability_name(args.capability) if args.capability else ""
            for p in client.iter_patterns(capability=capability):
                pats.append(p)
                if len(pats) >= args.limit:
                    break
            if args.json:
                _print_json({"patterns": [_as_json(p) for p in pats]})
            else:
                render.patterns(_console(), [render.printable(p) for p in pats])
    return EXIT_OK


def _capability_name(name: str) -> str:
    """--capability of `pml list`: `capabilities/ID` or a bare id as the listings print it."""
    return name if "/" in name else f"capabilities/{name}"


def _resource_name(name: str) -> str:
    """NAME of `pml show` and `pml delete`: a resource name, or a bare id as `pml record` and
    the listings print it, whose prefix says its kind (`cap_...`: a capability; a bare
    capability id was looked up as a pattern, NOT_FOUND)."""
    if "/" in name:
        return name
    return f"capabilities/{name}" if name.startswith("cap_") else f"patterns/{name}"


def show(args: argparse.Namespace) -> int:
    name = _resource_name(args.name)
    with _client(args) as client:
        if name.startswith("capabilities/"):
            capability = client.get_capability(name)
            if args.json:
                _print_json(_as_json(capability))
            else:
                render.capability_detail(_console(), render.printable(capability))
        else:
            pattern = client.get_pattern(name)
            if args.json:
                _print_json(_as_json(pattern))
            else:
                render.pattern_detail(_console(), render.printable(pattern))
    return EXIT_OK


def delete(args: argparse.Namespace) -> int:
    name = _resource_name(args.name)
    with _client(args) as client:
        if name.startswith("capabilities/"):
            client.delete_capability(name)
        else:
            client.delete_pattern(name)
    if args.json:
        _print_json({"deleted": name})
    else:
        _console().print(f"deleted {name}")
    return EXIT_OK


def failures(args: argparse.Namespace) -> int:
    with _client(args) as client:
        items = list(
            client.list_failures(page_size=min(args.limit, LIMITS.page_size.bound)).failures
        )
    if args.json:
        _print_json({"failures": [_as_json(f) for f in items]})
    else:
        render.failures(_console(), [render.printable(f) for f in items])
    return EXIT_OK


def retention(args: argparse.Namespace) -> int:
    with _client(args) as client:
        reply = client.run_retention(apply=args.apply)
    if args.json:
        _print_json(_as_json(reply))
    else:
        render.retention(_console(), render.printable(reply))
    return EXIT_OK


def stats(args: argparse.Namespace) -> int:
    with _client(args) as client:
        reply = client.stats()
    if args.json:
        _print_json(_as_json(reply))
    else:
        render.stats(_console(), render.printable(reply))
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "record": record,
    "import": import_file,
    "suggest": suggest,
    "list": list_items,
    "show": show,
    "delete": delete,
    "failures": failures,
    "retention": retention,
    "stats": stats,
}


def _fail(args: argparse.Namespace, code: int, error: dict[str, Any]) -> int:
    """One line on stderr: JSON with --json, else `pml CMD: error: ...`."""
    if args.json:
        print(json.dumps({"error": error}, ensure_ascii=False), file=sys.stderr)
        return code
    text = error["message"]
    if "status" in error:
        text = f"{error['status']}: {text}"
    # Each violation names its field, unless the message already says it (the server's message
    # is often the violations themselves, the client's refusals too: said once, not twice).
    fields = "; ".join(
        said
        for v in error.get("violations", [])
        if (said := f"{v['field']}: {v['description']}") not in text
        and f"{v['field']} {v['description']}" not in text
    )
    if fields:
        text += f" ({fields})"
    if error.get("retry_after_seconds") is not None:
        text += f"; retry in {error['retry_after_seconds']:g} s"
    print(f"pml {args.command}: error: {' '.join(text.split())}", file=sys.stderr)
    return code


# A request field the server names in a refusal, said in text as the flag that set it:
# `plan_size` is no name the user typed (`-k` is checked before sending). `--json` keeps the
# proto field names, as its replies do.
_FLAG_OF_FIELD = {
    "suggest": {
        "plan_size": "--plans",
        "min_match": "--min-match",
        "min_success": "--min-success",
        "tags": "--tag",
        "available_tools.tools": "--tools/--available-tool",  # one list, --tools' first
        "context.session_id": "--session",
        "context.previous_tools": "--after",
        "context.previous_patterns": "--after-pattern",
    }
}
# A field the server names, an item of a repeated one by its index: `tags[1]`.
_FIELD = re.compile(r"(?P<name>[A-Za-z_.]+)(?:\[(?P<index>\d+)\])?")


def _as_flag(field: str, flags: dict[str, str]) -> str:
    """`field` said as the flag that set it (`tags[1]`: `--tag #2`, the second given); a
    field no flag sets, as the server named it."""
    match = _FIELD.fullmatch(field)
    if match is None or match["name"] not in flags:
        return field
    flag = flags[match["name"]]
    return flag if match["index"] is None else f"{flag} #{int(match['index']) + 1}"


def run(args: argparse.Namespace) -> int:
    """Run one client command; its exit code."""
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows at the latest here
        return code
    except BrokenPipeError:
        return output_closed()
    except InputError as err:
        return _fail(args, EXIT_USAGE, {"message": str(err)})
    except OSError as err:  # the TLS files given to the client
        return _fail(args, EXIT_USAGE, {"message": f"{err.filename or ''}: {err.strerror or err}"})
    except PmlClientError as err:
        unreachable = err.code in _UNREACHABLE
        error: dict[str, Any] = {"status": err.code.name, "message": err.message}
        flags = {} if args.json else _FLAG_OF_FIELD.get(args.command, {})
        violations = [(_as_flag(f, flags), d) for f, d in err.violations]
        for field, _ in err.violations:  # the message is often the violations themselves
            said = _as_flag(field, flags).replace("\\", "\\\\")  # a replacement string
            error["message"] = re.sub(
                rf"(^|; ){re.escape(field)}: ", rf"\g<1>{said}: ", error["message"]
            )
        if isinstance(err, CertificateError):  # a server answered: its certificate is refused
            error["message"] = err.saying("--tls-ca")
        elif isinstance(err, ClientCertificateError):  # a server asked for a certificate
            error["message"] = err.saying("--tls-cert and --tls-key")
        elif isinstance(err, TlsMismatchError):  # TLS on one side only
            error["message"] = err.saying("--tls")
        elif unreachable and err.retry_delay_seconds is None:
            error["message"] = f"no pml server answered at {args.server} ({err.message})"
        if violations:
            error["violations"] = [{"field": f, "description": d} for f, d in violations]
        if err.retry_delay_seconds is not None:
            error["retry_after_seconds"] = err.retry_delay_seconds
        return _fail(args, EXIT_UNREACHABLE if unreachable else EXIT_REFUSED, error)


__all__ = [
    "COMMANDS",
    "EXIT_NOT_TAKEN",
    "EXIT_OUTPUT_CLOSED",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "output_closed",
    "run",
]
