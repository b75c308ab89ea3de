"""The client-side `pml` commands: each builds a `PmlClient`, calls it and renders the reply."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable

from google.protobuf import json_format
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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


def import_file(args: argparse.Namespace) -> int:
    console = _console()
    records = []
    for number, line in enumerate(args.file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json_format.Parse(line, resources_pb2.ExecutionRecord()))
        except json_format.ParseError as err:
            return _usage_error(f"{args.file}:{number}: not an ExecutionRecord: {err}")
    outcomes: Counter[str] = Counter()
    refused: list[tuple[str, str]] = []
    columns = (TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with _client(args) as client, Progress(*columns, console=console) as progress:
        task = progress.add_task("import", total=len(records))

        def on_ack(ack: pml_pb2.StreamTracesResponse) -> None:
            if ack.HasField("error"):
                outcomes["refused"] += 1
                refused.append((ack.execution_id, ack.error.message))
            else:
                name = resources_pb2.CaptureOutcome.Name(ack.result.outcome)
                outcomes[name.removeprefix("CAPTURE_OUTCOME_").lower()] += 1
                if ack.result.replayed:
                    outcomes["replayed"] += 1
            progress.advance(task)

        report = client.upload(records, on_ack=on_ack)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) or "nothing"
    console.print(f"imported {len(records)} records: {summary}; reconnects: {report.reconnects}")
    for eid, message in refused[:20]:
        console.print(f"  [red]refused[/] {eid}: {message}")
    return 1 if refused else 0


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
