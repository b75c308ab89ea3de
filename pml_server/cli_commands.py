"""The client-side `pml` commands: each builds a `PmlClient`, calls it and renders the reply."""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from google.protobuf import json_format
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

from pml_server import cli_render as render
from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from pml_server.client import PmlClient, PmlClientError, make_record


def _console() -> Console:
    # Made per command, so the width follows the terminal (or $COLUMNS) at call time.
    return Console()


def _client(args: argparse.Namespace) -> PmlClient:
    return PmlClient(
        args.server,
        api_key=args.api_key,
        tls=args.tls,
        root_certificates=args.tls_ca,
        client_cert=args.tls_cert,
        client_key=args.tls_key,
    )


def _usage_error(message: str) -> int:
    Console(stderr=True).print(f"[red]error[/] {message}")
    return 2


def record(args: argparse.Namespace) -> int:
    console = _console()
    if args.file is not None:
        rec = json_format.Parse(args.file.read_text(), resources_pb2.ExecutionRecord())
    else:
        code = args.code_file.read_text() if args.code_file else args.code
        if args.intent is None or code is None:
            return _usage_error("give --intent and --code (or --code-file), or --file")
        failed = []
        for item in args.failed_tool:
            tool, _, error = item.partition(":")
            failed.append((tool, error or "failed"))
        rec = make_record(
            args.intent,
            code,
            args.language,
            tools=args.tool,
            failed_tools=failed,
            request_id=args.request_id,
            duration_ms=args.duration_ms,
        )
    with _client(args) as client:
        render.capture(console, client.record(rec))
    return 0


def _jsonl_records(
    path: Path, bad: Callable[[int, str], None]
) -> Iterator[tuple[int, resources_pb2.ExecutionRecord]]:
    """(line number, record) of each non-empty line of `path`, read a line at a time; a line
    that is not an ExecutionRecord goes to `bad` and is skipped."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
                yield number, json_format.Parse(line, resources_pb2.ExecutionRecord())
            except (json_format.ParseError, UnicodeDecodeError) as err:
                bad(number, str(err).splitlines()[0][:300])


def import_file(args: argparse.Namespace) -> int:
    """`pml import FILE`: stream a JSONL file of ExecutionRecords over StreamTraces, with a
    progress bar and a summary counting each record once (saved / counted / rejected /
    refused, replays among them, bad lines, executions/s)."""
    console = _console()
    errors = Console(stderr=True)
    path: Path = args.file
    if not path.is_file():
        return _usage_error(f"{path}: no such file")
    bad_lines: list[int] = []

    def report_bad(number: int, why: str) -> None:
        bad_lines.append(number)
        errors.print(f"[red]error[/] {path}:{number}: not an ExecutionRecord: {why}", markup=True)

    # One quick pass counts the lines for the progress bar (and, with --strict, checks them all
    # before anything is sent); the upload then reads the file again, a line at a time.
    total = 0
    for _ in _jsonl_records(path, report_bad if args.strict else lambda n, w: None):
        total += 1
    if args.strict and bad_lines:
        errors.print(f"{len(bad_lines)} bad lines: nothing was sent (--strict)")
        return 2
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

    def pairs() -> Iterator[tuple[str, resources_pb2.ExecutionRecord]]:
        for number, record in _jsonl_records(path, report_bad):
            if not record.request_id:  # stays the same if the stream must be resent
                record.request_id = str(uuid.uuid4())
            yield f"line-{number}", record  # unique even when request ids repeat

    start = time.perf_counter()
    with _client(args) as client, Progress(*columns, console=console) as progress:
        task = progress.add_task("import", total=total)

        def on_ack(ack: pml_pb2.StreamTracesResponse) -> None:
            if ack.HasField("error"):
                outcomes["refused"] += 1
                if len(refused) < 20:
                    refused.append((ack.execution_id, ack.error.message))
            else:
                name = resources_pb2.CaptureOutcome.Name(ack.result.outcome)
                outcomes[name.removeprefix("CAPTURE_OUTCOME_").lower()] += 1
                if ack.result.replayed:
                    outcomes["replayed"] += 1
            progress.advance(task)

        report = client.upload_pairs(pairs(), on_ack=on_ack, keep_acks=False)
    elapsed = time.perf_counter() - start
    answered = sum(n for k, n in outcomes.items() if k != "replayed")
    parts = [f"{outcomes[k]} {k}" for k in ("saved", "counted", "rejected", "refused")]
    parts += [f"{n} {k}" for k, n in sorted(outcomes.items()) if k not in _SUMMARY_KEYS]
    if bad_lines:
        parts.append(f"{len(bad_lines)} bad lines skipped")
    console.print(
        f"imported {answered} records from {path}: {', '.join(parts)}; "
        f"{answered / elapsed if elapsed > 0 else 0.0:.1f} executions/s; "
        f"reconnects: {report.reconnects}"
    )
    for eid, message in refused:
        console.print(f"  [red]refused[/] {eid}: {message}")
    return 1 if refused or bad_lines else 0


_SUMMARY_KEYS = ("saved", "counted", "rejected", "refused")


def suggest(args: argparse.Namespace) -> int:
    console = _console()
    tools = [t for t in args.tools.split(",") if t] if args.tools is not None else None
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
        )
    render.suggestions(console, reply)
    return 0


def list_items(args: argparse.Namespace) -> int:
    console = _console()
    with _client(args) as client:
        if args.capabilities:
            caps = []
            for c in client.iter_capabilities():
                caps.append(c)
                if len(caps) >= args.limit:
                    break
            render.capabilities(console, caps)
        else:
            pats = []
            for p in client.iter_patterns():
                pats.append(p)
                if len(pats) >= args.limit:
                    break
            render.patterns(console, pats)
    return 0


def show(args: argparse.Namespace) -> int:
    console = _console()
    name = args.name if "/" in args.name else f"patterns/{args.name}"
    with _client(args) as client:
        if name.startswith("capabilities/"):
            render.capability_detail(console, client.get_capability(name))
        else:
            render.pattern_detail(console, client.get_pattern(name))
    return 0


def delete(args: argparse.Namespace) -> int:
    console = _console()
    with _client(args) as client:
        if args.name.startswith("capabilities/"):
            client.delete_capability(args.name)
        else:
            name = args.name if "/" in args.name else f"patterns/{args.name}"
            client.delete_pattern(name)
    console.print(f"deleted {args.name}")
    return 0


def failures(args: argparse.Namespace) -> int:
    console = _console()
    with _client(args) as client:
        items = list(client.list_failures(page_size=min(args.limit, 1000)).failures)
    render.failures(console, items)
    return 0


def retention(args: argparse.Namespace) -> int:
    console = _console()
    with _client(args) as client:
        render.retention(console, client.run_retention(apply=args.apply))
    return 0


def stats(args: argparse.Namespace) -> int:
    console = _console()
    with _client(args) as client:
        render.stats(console, client.stats())
    return 0


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

__all__ = ["COMMANDS", "PmlClientError"]
