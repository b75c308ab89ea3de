"""OTLP trace ingest: `opentelemetry.proto.collector.trace.v1.TraceService/Export` on pml's
own port. Same keys, roles, tenants and quotas as PmlService; the mapping is
`pml_server.otel` (pure). A malformed execution is rejected alone (OTLP partial success); an
engine that cannot take captures fails the whole call with a retryable status, which exporters
retry, and request ids (trace id, span id) make the retry count nothing twice."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from pml_server._proto.pml.v1 import resources_pb2
from pml_server.api import convert
from pml_server.api.metrics import Metrics
from pml_server.api.security.auth import Caller, Role
from pml_server.api.servicer import PmlServicer, ServiceDeps
from pml_server.domain import model
from pml_server.domain.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
)
from pml_server.domain.limits import Limits
from pml_server.otel import (
    INCOMPLETE_SPAN_ID,
    LATE_CALL,
    OWN_PREFIX,
    MappedBatch,
    MappedExecution,
    Rejection,
    flatten,
    held_forms,
    incomplete_links,
    incomplete_marker,
    late_calls,
    map_spans,
    parse_export,
    settling_forms,
    tool_of,
)
from pml_server.service._heap import release_free_memory
from pml_server.storage.pending_spans import PendingSpans

log = logging.getLogger("pml.otlp")
SERVICE_NAME = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
# Rejection reasons quoted in `error_message`; the count says how many more there were.
_REASONS_SHOWN = 5
# An Export this large frees enough that giving it back is worth a `malloc_trim`.
_TRIM_AFTER_SPANS = 1024
# The shorter runs tried for a run refused as captured before (`MappedExecution.shorter_runs`):
# at most this many more captures per such run of an Export.
_SHORTER_RUNS_TRIED = 4
# Traces of settled roots mapped under one hold of a tenant's lock by the settle thread.
_SETTLED_PER_TURN = 256
SpanCounter = Callable[[str, int], None]


def _record(execution: MappedExecution) -> resources_pb2.ExecutionRecord:
    return resources_pb2.ExecutionRecord(
        request_id=execution.request_id,
        intent=execution.intent,
        code=execution.code,
        language=execution.language,
        duration_ms=execution.duration_ms,
        tags=list(execution.tags),
        session_id=execution.session_id,
        # A failed execution span fails the run even when each call succeeded (unset: the
        # calls decide).
        status=(
            resources_pb2.EXECUTION_STATUS_FAILURE
            if execution.failed
            else resources_pb2.EXECUTION_STATUS_UNSPECIFIED
        ),
        tool_calls=[
            resources_pb2.ToolCall(
                tool=c.tool,
                ok=c.ok,
                error=c.error,
                arguments_json=c.arguments_json,
                duration_ms=c.duration_ms,
            )
            for c in execution.calls
        ],
    )


def refuse_past_bounds(limits: Limits, groups: int = 0, spans: int = 0) -> None:
    """RESOURCE_EXHAUSTED (413 on OTLP/HTTP) for an Export of more resource_spans and
    scope_spans entries together (`groups`) or spans than the limits table allows, checked
    before anything is mapped (docs/connect.md, "OTLP traces in")."""
    if (too_many := limits.otlp_groups.excess(range(groups))) is not None:
        raise ResourceExhaustedError(
            f"this Export's resource_spans and scope_spans entries {too_many}: group the "
            "spans of one resource and scope in one entry, or export in smaller batches"
        )
    if (too_many := limits.otlp_spans.excess(range(spans))) is not None:
        raise ResourceExhaustedError(
            f"this Export's spans {too_many}: export in smaller batches (the "
            "OpenTelemetry SDK's batch span processor sends 512 by default)"
        )


# Why a run whose request id was captured before with another execution is rejected: its root
# span exported again with other calls (docs/capture.md, "Spans arriving after their run was
# mapped"). The API's own message speaks of request ids a client chose, which an exporter did not.
_CAPTURED_BEFORE = (
    "this run's root span was captured before with other calls or content (a call that ended "
    "after the root span, or the root exported again with other spans): a captured run is never "
    "amended, so this one is not captured"
)


def _violations(err: InvalidArgumentError | AlreadyExistsError) -> str:
    if isinstance(err, AlreadyExistsError):
        return _CAPTURED_BEFORE
    return "; ".join(f"{v.field}: {v.description}" for v in err.violations) or str(err)


class TraceIngestServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(
        self,
        deps: ServiceDeps,
        draining: threading.Event,
        count_spans: SpanCounter,
        pending: PendingSpans | None = None,
    ) -> None:
        self._d = deps
        self._pending = pending
        self._dim = deps.engine.embedding_dim()
        self._draining = draining
        self._count_spans = count_spans

    def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        return self.export(request, context.invocation_metadata())

    def admit(self, metadata: Sequence[tuple[str, str | bytes]]) -> Caller:
        """The caller of an Export with `metadata`, before its body is decoded: raises the
        refusal of a server draining, a missing or unknown key, a key without the write role
        and a tenant over its quota (a peek, as the gRPC port's early refusal; `hold` decides
        exactly). OTLP/HTTP calls it before it inflates or parses a body (docs/connect.md,
        "OTLP traces in")."""
        if self._draining.is_set():
            raise UnavailableError("the server is shutting down; retry on another instance")
        caller = self._d.keys.require(metadata, Role.WRITE)
        refusal = self._d.quotas.refusal(caller.tenant)
        if refusal is not None:  # (a new error each time: the peek's is shared by every call)
            raise ResourceExhaustedError(str(refusal), refusal.retry_after_seconds)
        return caller

    def export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        metadata: Sequence[tuple[str, str | bytes]],
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        """One Export, from either transport: `metadata` are the call's gRPC metadata or its
        HTTP headers (lower-case names), which carry the caller's key."""
        caller = self.admit(metadata)
        resources = request.resource_spans
        groups = len(resources)
        if groups <= self._d.limits.otlp_groups.bound:  # (else refused without a count)
            groups += sum(len(r.scope_spans) for r in resources)
        refuse_past_bounds(self._d.limits, groups=groups)
        spans = sum(len(s.spans) for r in resources for s in r.scope_spans)
        refuse_past_bounds(self._d.limits, groups=groups, spans=spans)
        warnings: list[str] = []  # about runs captured (a conversation id not used)
        # The OTLP edge: pml's own attributes are dropped from what a client sent, before
        # anything is mapped or held (docs/capture.md, What a held span keeps).
        sent, marked = flatten(request)
        with self._d.quotas.hold(caller.tenant):
            if self._pending is None:
                batch = map_spans(sent, self._d.limits.intent.bound)
                rejections = list(batch.rejections)
                recorded = self._capture(
                    caller.tenant, batch.executions, rejections, warnings=warnings
                )
                ignored = batch.ignored_spans + sum(len(w) for w in batch.waiting.values())
                held = settling = 0
            else:
                with self._pending.tenant_lock(caller.tenant):
                    recorded, ignored, held, settling, rejections = self._export_holding(
                        caller.tenant, sent, warnings=warnings
                    )
        del sent
        if spans >= _TRIM_AFTER_SPANS:
            # The mapping's memory is free now but glibc keeps it in the process: hand it back
            # (docs/reliability.md, "OTLP Export memory").
            release_free_memory()
        rejected = sum(r.span_count for r in rejections)
        self._count_spans("mapped", recorded)
        self._count_spans("ignored", ignored)
        self._count_spans("rejected", rejected)
        self._count_spans("held", held + settling)
        if not (rejections or ignored or held or settling or warnings or marked):
            return trace_service_pb2.ExportTraceServiceResponse()
        # OTLP partial success: rejected spans are counted; spans accepted but ignored (not a
        # GenAI tool call) or held (waiting for their run's root span, or a root span for its
        # calls) are named as a warning.
        notes = [_message(rejections)] if rejections else []
        if warnings:
            notes.append(_shown(warnings, "runs captured with a warning"))
        if held:
            notes.append(f"{held} spans held until their run's invoke_agent (root) span arrives")
        if settling:
            assert self._pending is not None
            notes.append(
                f"{settling} invoke_agent spans with no tool call held "
                f"{self._pending.settle_seconds:g} s for calls exported after them"
            )
        if ignored:
            notes.append(f"{ignored} spans ignored (no GenAI tool call, or one seen twice)")
        if marked:
            notes.append(
                f"{marked} spans carried attributes named {OWN_PREFIX}*, which only pml sets "
                "on the spans it holds: dropped"
            )
        return trace_service_pb2.ExportTraceServiceResponse(
            partial_success=trace_service_pb2.ExportTracePartialSuccess(
                rejected_spans=rejected, error_message="; ".join(notes)
            )
        )

    def settle(self) -> None:
        """Capture the runs whose root span arrived before their calls, once the settle window
        has passed (docs/capture.md, "Runs split over several Exports"): the server's settle
        thread calls this, so that such a run is captured without waiting for another Export
        of its trace."""
        pending = self._pending
        if pending is None or self._draining.is_set():
            return
        for tenant in pending.settling_tenants():
            with pending.tenant_lock(tenant):
                matured = pending.matured(tenant)
            # A bounded batch at a time, the tenant's lock let go between them: Exports wait
            # for one batch at most. (A trace an Export settled meanwhile reads back nothing.)
            for start in range(0, len(matured), _SETTLED_PER_TURN):
                if self._draining.is_set():
                    return
                warnings: list[str] = []
                with pending.tenant_lock(tenant):
                    recorded, ignored, held, settling, rejections = self._export_holding(
                        tenant, [], matured[start : start + _SETTLED_PER_TURN], warnings
                    )
                self._count_spans("mapped", recorded)
                self._count_spans("ignored", ignored)
                self._count_spans("rejected", sum(r.span_count for r in rejections))
                self._count_spans("held", held + settling)
                if rejections:
                    log.warning("otlp: settled runs of tenant %r: %s", tenant, _message(rejections))
                if warnings:
                    log.warning(
                        "otlp: settled runs of tenant %r: %s",
                        tenant,
                        _shown(warnings, "runs captured with a warning"),
                    )

    def _export_holding(
        self,
        tenant: str,
        spans: list[trace_pb2.Span],
        settled: Sequence[bytes] = (),
        warnings: list[str] | None = None,
    ) -> tuple[int, int, int, int, list[Rejection]]:
        """Map `spans` (an Export's) with the spans held for their traces and for `settled`
        (traces whose settling root's window has passed), capture what is complete, hold what
        waits for its execution span or its calls (docs/capture.md, "Runs split over several
        Exports"). Returns (spans captured, ignored, newly held, agent spans held settling,
        rejections); the warnings about runs captured go to `warnings`."""
        pending = self._pending
        assert pending is not None
        expiry_links = self._expire(tenant)
        sent = Counter(s.trace_id for s in spans)
        loaded, settling = _read_held(pending, tenant, [*sent, *settled], spans)
        # A settling root sent again (an exporter retrying its Export) is that root seen twice:
        # mapped now, with only the calls that arrived so far, its run would be captured short
        # and the calls after them ignored (docs/capture.md, "A root span that arrives first").
        again = len(spans)
        spans = [s for s in spans if (s.trace_id, s.span_id) not in settling]
        again -= len(spans)
        conversations: dict[bytes, frozenset[str]] = {}
        for trace_id in {s.trace_id for s in spans}:
            known = pending.mapped(tenant, trace_id)
            lost = (known.lost if known is not None else set()) | expiry_links.get(trace_id, set())
            if lost:
                spans.append(incomplete_marker(trace_id, lost))
            if known is not None and known.conversations:
                conversations[trace_id] = known.conversations
        batch = map_spans(spans, self._d.limits.intent.bound, conversations)
        del spans
        # A span between a root held settling and calls still to come (an agent's step span
        # arriving before its calls) is held with them, else the calls never reach the root
        # (docs/capture.md, "A root span that arrives first").
        for trace_id in {t for t, _ in settling} & batch.unlinked.keys():
            batch.waiting.setdefault(trace_id, []).extend(batch.unlinked[trace_id])
            batch.ignored_spans -= len(batch.unlinked[trace_id])
        rejections = list(batch.rejections)
        recorded = self._capture_new(tenant, batch, rejections, warnings)
        plan = _HoldPlan(loaded, pending.room(tenant))
        late = sum(
            self._hold_waiting(tenant, trace_id, waiting, plan, rejections)
            for trace_id, waiting in batch.waiting.items()
        )
        for trace_id, links in expiry_links.items():
            if (trace_id, INCOMPLETE_SPAN_ID) not in plan.kept:  # (else: held again above)
                plan.mark(trace_id, links)
        held = len(plan.writes) - plan.markers
        alone = {trace_id for trace_id, count in sent.items() if count == 1}
        roots = _settling(batch.idle, alone, loaded, pending, tenant)[: max(0, plan.room)]
        plan.writes += [
            (s.trace_id, s.span_id, s.SerializeToString()) for s in settling_forms(roots)
        ]
        pending.update(tenant, plan.writes, [k for k in loaded if k not in plan.kept])
        ignored = batch.ignored_spans + late + again - len(roots)
        return recorded, ignored, held, len(roots), rejections

    def _expire(self, tenant: str) -> dict[bytes, set[bytes]]:
        """Delete `tenant`'s held traces past their age; returns, per trace, the ids of the
        spans deleted and of their parents. A run whose held spans expire can no longer be
        captured whole: a marker of them is held in their place, so that its root arriving
        with its last calls is rejected (before, the run was captured from those last calls
        alone, as a success)."""
        assert self._pending is not None
        expiry_links: dict[bytes, set[bytes]] = {}
        expired = 0
        calls: list[str] = []  # "<trace>/<span> (<tool>)" of each held call lost
        for trace_id, gone in self._pending.expire(tenant):
            links = set()
            for held_span in gone:
                if held_span.span_id == INCOMPLETE_SPAN_ID:
                    continue  # an old marker goes with its trace
                proto = trace_pb2.Span()
                proto.ParseFromString(held_span.data)
                links.add(proto.span_id)
                if proto.parent_span_id:
                    links.add(proto.parent_span_id)
                expired += 1
                if (tool := tool_of(proto)) is not None:
                    calls.append(
                        f"{trace_id.hex()}/{proto.span_id.hex()} ({tool or 'no tool name'})"
                    )
            if links:
                expiry_links[trace_id] = links
        if expired:
            # Held spans were acknowledged: what is lost, and why, is said here and counted
            # once (docs/capture.md, "Runs split over several Exports").
            self._count_spans("expired", expired)
            log.warning(
                "otlp: %d held spans of tenant %r expired, deleted after otlp_pending_seconds: "
                "their run's root span never arrived in this process (not exported, or "
                "captured before the calls came: after a restart or on another replica a call "
                "that ended after its run's root is held until it expires); calls lost: %s",
                expired,
                tenant,
                _shown(calls, "calls") if calls else "none (the spans linking calls)",
            )
        return expiry_links

    def _capture_new(
        self,
        tenant: str,
        batch: MappedBatch,
        rejections: list[Rejection],
        warnings: list[str] | None = None,
    ) -> int:
        """Capture `batch`'s executions but those already captured whole, and remember the
        runs mapped; returns the spans captured (or replayed)."""
        pending = self._pending
        assert pending is not None
        # A run already mapped from more spans than an Export sent again brings (a retry of the
        # Export with its root span, the calls held before consumed since): that run's answer
        # stands; capturing the part would be refused as another execution under its id.
        # Sent again with calls the run was not captured with (calls that ended after the root,
        # exported beside it by a collector's retry): the run's answer stands, and each such
        # call is rejected as arriving after its run was mapped, never captured as a second
        # execution under the run's id (docs/capture.md, "Spans arriving after their run was
        # mapped").
        executions: list[MappedExecution] = []
        replayed = 0
        for execution in batch.executions:
            known = pending.mapped(tenant, execution.trace_id)
            run = known.runs.get(execution.span_id) if known is not None else None
            if run is not None and (later := execution.call_ids - run):
                trace = execution.trace_id.hex()
                rejections += [Rejection(f"{trace}/{c.hex()}", LATE_CALL, 1) for c in sorted(later)]
                replayed += execution.span_count - len(later)
            elif run is not None and execution.call_ids < run:
                replayed += execution.span_count
            else:
                executions.append(execution)
        captured: list[MappedExecution] = []
        recorded = self._capture(tenant, executions, rejections, captured, warnings) + replayed
        for trace_id, settled in batch.settled.items():
            runs = {e.span_id: e.call_ids for e in captured if e.trace_id == trace_id}
            named = batch.conversations.get(trace_id, frozenset())
            calls = batch.settled_calls.get(trace_id, set())
            pending.remember(tenant, trace_id, settled, runs, named, calls)
        return recorded

    def _hold_waiting(
        self,
        tenant: str,
        trace_id: bytes,
        waiting: list[trace_pb2.Span],
        plan: _HoldPlan,
        rejections: list[Rejection],
    ) -> int:
        """Plan the holding of one trace's spans waiting for their execution span (and of its
        marker of lost spans); returns how many were seen twice (below a run already mapped,
        and no call of their own: those are rejected, `late_calls`)."""
        pending = self._pending
        assert pending is not None
        marked = [s for s in waiting if s.span_id == INCOMPLETE_SPAN_ID]
        waiting = [s for s in waiting if s.span_id != INCOMPLETE_SPAN_ID]
        marker_held = (trace_id, INCOMPLETE_SPAN_ID) in plan.loaded
        links = set().union(*(incomplete_links(m) for m in marked))
        lost_before = len(links)
        late = 0
        known = pending.mapped(tenant, trace_id)
        if known is not None:
            # Spans below a run already mapped, never held: the MCP server's own span of a call,
            # exported after the agent's spans, is that call seen twice (ignored); a call that
            # ended after its run's root span is rejected for it (docs/capture.md, "Spans
            # arriving after their run was mapped").
            below = _below(waiting, known.spans)
            spans_below = [s for s in waiting if s.span_id in below]
            later = late_calls(spans_below, known.spans, known.calls)
            rejections += [
                Rejection(f"{trace_id.hex()}/{s.span_id.hex()}", LATE_CALL, 1) for s in later
            ]
            late = len(below) - len(later)
            waiting = [s for s in waiting if s.span_id not in below]
        new = [s for s in waiting if (trace_id, s.span_id) not in plan.loaded]
        if len(new) > plan.room:
            self._count_spans("overflow", len(new))
            holding = pending.max_spans - plan.room
            log.warning(
                "otlp: %d spans of trace %s refused: tenant %r holds %d spans waiting for "
                "their run's root span (otlp_pending_spans)",
                len(new),
                trace_id.hex(),
                tenant,
                holding,
            )
            rejections.append(
                Rejection(
                    f"{trace_id.hex()}/{new[0].span_id.hex()}",
                    f"{len(new)} spans wait for their run's root span, and this tenant already "
                    f"holds {holding} such spans (otlp_pending_spans = {pending.max_spans})",
                    len(new),
                )
            )
            # The run these spans belong to can no longer be captured whole: its held spans
            # are let go, and a marker rejects the run when its root arrives (before, it was
            # captured without them, a shorter run stored as a success).
            for s in waiting:
                links.add(s.span_id)
                if s.parent_span_id:
                    links.add(s.parent_span_id)
                if (trace_id, s.span_id) in plan.loaded:
                    plan.room += 1  # let go below
            new = waiting = []
        if links:
            key = (trace_id, INCOMPLETE_SPAN_ID)
            if len(links) == lost_before and marker_held:
                plan.kept.add(key)
            elif marker_held or plan.room > 0:  # (the spans let go made room for it)
                plan.mark(trace_id, links)
                plan.room -= 0 if marker_held else 1
            else:  # no room at all: remembered in memory
                pending.remember_lost(tenant, trace_id, links)
        plan.room -= len(new)
        # Stripped and redacted before they reach the store (docs/capture.md, What a held span
        # keeps).
        plan.writes += [(trace_id, s.span_id, s.SerializeToString()) for s in held_forms(new)]
        plan.kept.update((trace_id, s.span_id) for s in waiting)
        return late

    def _capture(
        self,
        tenant: str,
        executions: list[MappedExecution],
        rejections: list[Rejection],
        captured: list[MappedExecution] | None = None,
        warnings: list[str] | None = None,
    ) -> int:
        """Validate and capture `executions` in batches; refused ones go to `rejections`, those
        captured (or replayed) to `captured`, and their warnings (`session_note`) to
        `warnings`. Returns the spans captured. Any other error fails the call (retryable
        statuses)."""
        valid: list[tuple[MappedExecution, model.ExecutionRecord]] = []
        for execution in executions:
            try:
                record = convert.execution_record(
                    _record(execution), "span", self._d.limits, self._dim
                )
            except InvalidArgumentError as err:
                rejections.append(Rejection(execution.span, _violations(err), execution.span_count))
                continue
            valid.append((execution, record))
        recorded = 0
        # Runs refused as captured before with other calls, and the shorter runs they may
        # have been captured as (`shorter_runs`), tried next.
        again: list[tuple[MappedExecution, list[MappedExecution]]] = []
        for execution, result in self._record(tenant, valid):
            if isinstance(result, AlreadyExistsError) and (
                shorter := execution.shorter_runs(_SHORTER_RUNS_TRIED)
            ):
                again.append((execution, shorter))
            elif isinstance(result, AlreadyExistsError):
                recorded += self._captured_before(tenant, execution, rejections, captured, warnings)
            elif isinstance(result, InvalidArgumentError):
                rejections.append(
                    Rejection(execution.span, _violations(result), execution.span_count)
                )
            else:
                recorded += self._captured(execution, result, captured, warnings)
        if again:
            recorded += self._capture_shorter(tenant, again, rejections, captured, warnings)
        return recorded

    def _capture_shorter(
        self,
        tenant: str,
        again: list[tuple[MappedExecution, list[MappedExecution]]],
        rejections: list[Rejection],
        captured: list[MappedExecution] | None,
        warnings: list[str] | None,
    ) -> int:
        """A root sent again with calls that ended after it, in a process that no longer
        remembers its run (a restart, another replica), the run refused as captured before:
        each of its shorter runs is tried in turn (a round of captures for all of them). When
        one replays the capture, the capture stands and counts as such, and the calls it
        leaves out alone are rejected as arriving after their run was mapped, as the process
        that captured the run answers; when none does, the run is rejected whole as captured
        before (docs/capture.md, "Spans arriving after their run was mapped"). Each span is
        counted once: before, the root and the calls captured with it were counted rejected
        too."""
        recorded = 0
        while again:
            valid: list[tuple[MappedExecution, model.ExecutionRecord]] = []
            of: dict[int, tuple[MappedExecution, list[MappedExecution]]] = {}
            for execution, shorter in again:
                run = shorter.pop(0)
                try:
                    record = convert.execution_record(
                        _record(run), "span", self._d.limits, self._dim
                    )
                except InvalidArgumentError:  # (fewer calls of a valid run: not expected)
                    rejections.append(
                        Rejection(execution.span, _CAPTURED_BEFORE, execution.span_count)
                    )
                    continue
                valid.append((run, record))
                of[id(run)] = (execution, shorter)
            again = []
            for run, result in self._record(tenant, valid):
                execution, shorter = of[id(run)]
                if not isinstance(result, InvalidArgumentError | AlreadyExistsError):
                    rejections += [Rejection(r, LATE_CALL, 1) for r in execution.calls_beyond(run)]
                    recorded += self._captured(run, result, captured, warnings)
                elif shorter:
                    again.append((execution, shorter))
                else:
                    recorded += self._captured_before(
                        tenant, execution, rejections, captured, warnings
                    )
        return recorded

    def _captured_before(
        self,
        tenant: str,
        execution: MappedExecution,
        rejections: list[Rejection],
        captured: list[MappedExecution] | None,
        warnings: list[str] | None,
    ) -> int:
        """A run refused as captured before, no shorter run of it replaying the capture. When
        every call it has ended after its root (`root_alone`: calls held after a restart or on
        another replica, the root exported again alone) and the root's request id was
        captured, the root is that capture and those calls alone are rejected as arriving
        after their run was mapped, as the process that captured the run answers; else the run
        is rejected whole (docs/capture.md, "Spans arriving after their run was mapped")."""
        alone = execution.root_alone()
        answer = (
            None if alone is None else self._d.engine.captured_answer(tenant, execution.request_id)
        )
        if alone is None or answer is None:
            rejections.append(Rejection(execution.span, _CAPTURED_BEFORE, execution.span_count))
            return 0
        rejections += [Rejection(r, LATE_CALL, 1) for r in execution.calls_beyond(alone)]
        return self._captured(alone, answer, captured, warnings)

    def _record(
        self, tenant: str, valid: list[tuple[MappedExecution, model.ExecutionRecord]]
    ) -> Iterator[
        tuple[MappedExecution, model.CaptureResult | InvalidArgumentError | AlreadyExistsError]
    ]:
        """Each of `valid` with the engine's answer, in batches; an error the call cannot
        answer for one run (not a refusal of it) fails the call (retryable statuses)."""
        batch_size = self._d.limits.capture_batch.bound
        for start in range(0, len(valid), batch_size):
            chunk = valid[start : start + batch_size]
            results = self._d.engine.record_many(tenant, [r for _, r in chunk])
            for (execution, _), result in zip(chunk, results, strict=True):
                if not isinstance(
                    result, model.CaptureResult | InvalidArgumentError | AlreadyExistsError
                ):
                    raise result
                yield execution, result

    def _captured(
        self,
        execution: MappedExecution,
        result: model.CaptureResult,
        captured: list[MappedExecution] | None,
        warnings: list[str] | None,
    ) -> int:
        """Note `execution` captured (or replayed) as `result`; returns its spans."""
        if captured is not None:
            captured.append(execution)
        if warnings is not None and execution.session_note:
            warnings.append(execution.session_note)
        if self._d.on_capture is not None:
            self._d.on_capture(result)
        return execution.span_count


@dataclass
class _HoldPlan:
    """What one Export leaves held: the spans and markers to write, the held spans read back
    (`loaded`) and those of them to keep, and the room left under `otlp_pending_spans`."""

    loaded: set[tuple[bytes, bytes]]
    room: int
    writes: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)
    kept: set[tuple[bytes, bytes]] = field(default_factory=set)
    markers: int = 0

    def mark(self, trace_id: bytes, links: set[bytes]) -> None:
        """Hold `trace_id`'s marker of lost spans (`links`), replacing any held before."""
        marker = incomplete_marker(trace_id, links)
        self.writes.append((trace_id, INCOMPLETE_SPAN_ID, marker.SerializeToString()))
        self.kept.add((trace_id, INCOMPLETE_SPAN_ID))
        self.markers += 1


def _read_held(
    pending: PendingSpans, tenant: str, trace_ids: list[bytes], spans: list[trace_pb2.Span]
) -> tuple[set[tuple[bytes, bytes]], set[tuple[bytes, bytes]]]:
    """Append to `spans` the spans held for `trace_ids` (but settling roots whose calls may
    still come: they stay held, and their calls wait beside them; and spans `spans` brings
    again, an exporter's retry, mapped from what was sent: the held form differs, and two
    different spans of one id reject their run, `map_spans`); returns their keys, and the keys
    of the roots left settling."""
    loaded: set[tuple[bytes, bytes]] = set()
    settling: set[tuple[bytes, bytes]] = set()
    sent = {(s.trace_id, s.span_id) for s in spans}
    for trace_id in pending.traces_held(tenant, list(dict.fromkeys(trace_ids))):
        for held_span in pending.load(tenant, trace_id):
            if pending.settling(held_span):
                settling.add((trace_id, held_span.span_id))
                continue
            if (trace_id, held_span.span_id) in sent:
                loaded.add((trace_id, held_span.span_id))
                continue
            proto = trace_pb2.Span()
            proto.ParseFromString(held_span.data)
            spans.append(proto)
            loaded.add((trace_id, held_span.span_id))
    return loaded, settling


def _settling(
    idle: dict[bytes, list[trace_pb2.Span]],
    alone: set[bytes],
    loaded: set[tuple[bytes, bytes]],
    pending: PendingSpans,
    tenant: str,
) -> list[trace_pb2.Span]:
    """The agent spans of an Export that came with no call and may precede their calls: each
    sent alone (`alone`: the traces with one span in the Export; a root exported with spans
    of its run was exported after them, by a processor that keeps the order), not read back
    from the hold (its window has passed: a turn that called no tool), and not part of a run
    mapped before (an Export sent again)."""
    roots: list[trace_pb2.Span] = []
    for trace_id, spans in idle.items():
        if trace_id not in alone:
            continue
        known = pending.mapped(tenant, trace_id)
        done = {s for t, s in loaded if t == trace_id}
        done |= known.spans if known is not None else set()
        roots += [s for s in spans if s.span_id not in done]
    return roots


def _below(waiting: list[trace_pb2.Span], mapped: set[bytes]) -> set[bytes]:
    """The span ids of `waiting` (spans of one trace with no execution span above them in
    the Export) whose chain of parents, through `waiting`, reaches a span of `mapped`."""
    parent = {s.span_id: s.parent_span_id for s in waiting}
    found: dict[bytes, bool] = {}
    for start in parent:
        path: list[bytes] = []
        current = start
        while current in parent and current not in found:
            found[current] = False  # on the path (a cycle ends here: not below)
            path.append(current)
            current = parent[current]
        answer = found.get(current, current in mapped)
        for sid in path:
            found[sid] = answer
    return {sid for sid, below in found.items() if below}


def _message(rejections: list[Rejection]) -> str:
    notes = [f"span {r.span}: {r.reason}" for r in rejections]
    return _shown(notes, "executions rejected")


def _shown(notes: list[str], what: str) -> str:
    """The first `_REASONS_SHOWN` of `notes`, and how many more `what` there were."""
    more = len(notes) - _REASONS_SHOWN
    return "; ".join(notes[:_REASONS_SHOWN]) + (f"; and {more} more {what}" if more > 0 else "")


class RunSettler:
    """The thread that captures runs whose root span arrived before their calls once their
    settle window has passed (`TraceIngestServicer.settle`, every `poll_seconds`); at start it
    reads the spans the store holds from before (a restart between a root and its capture)."""

    def __init__(self, servicer: TraceIngestServicer, pending: PendingSpans) -> None:
        self._servicer = servicer
        self._pending = pending
        self._poll = max(0.05, min(1.0, pending.settle_seconds / 4))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pml-otlp-settle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._pending.open_tenants()
        except Exception:  # the store is closing, or unreadable: Exports still settle
            log.exception("otlp: the spans held before this start could not be read")
        while not self._stopped.wait(self._poll):
            try:
                self._servicer.settle()
            except Exception:  # retried at the next poll; a held span stays held
                log.exception("otlp: settling held runs failed")

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()


def add_trace_ingest(
    server: grpc.Server, pml: PmlServicer, metrics: Metrics, pending: PendingSpans | None = None
) -> TraceIngestServicer:
    """Serve TraceService/Export beside `pml` (sharing its dependencies and drain flag);
    returns the servicer (OTLP/HTTP answers with it too: `pml_server.api.otlp_http`)."""

    def count(result: str, spans: int) -> None:
        if spans:
            metrics.otlp_spans.labels(result).inc(spans)

    servicer = TraceIngestServicer(pml.deps, pml.draining, count, pending)
    # `add_TraceServiceServicer_to_server`, but decoding with `parse_export` (strings that are
    # not UTF-8 do not refuse the Export: docs/capture.md, "OTLP traces").
    export = grpc.unary_unary_rpc_method_handler(
        servicer.Export,
        request_deserializer=parse_export,
        response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, {"Export": export}),)
    )
    return servicer
