"""A small in-memory EngineProtocol for API-layer tests only (never used by the server).

It follows the capture rules closely enough for the API's promises to be observable (idempotent
request ids, all-or-nothing, per-tenant data, cursors, deletion), with none of the real
intelligence: patterns are keyed by exact code, capabilities by tool sequence, and suggestions
rank by shared intent words.
"""

from __future__ import annotations

import hashlib
import threading
import time

from pml_server.domain import model
from pml_server.domain.errors import NotFoundError

DIM = 16


class FakeEngine:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.patterns: dict[str, dict[str, model.PatternView]] = {}
        self.results: dict[tuple[str, str], model.CaptureResult] = {}
        self.failures: dict[str, list[model.FailureEntry]] = {}
        self.rejected: dict[str, int] = {}
        self.ready = True
        self.closed = False
        self.record_delay = 0.0
        self.records_applied = 0

    def embedding_dim(self) -> int:
        return DIM

    def is_ready(self) -> bool:
        return self.ready

    def close(self) -> None:
        self.closed = True

    def record(self, tenant: str, record: model.ExecutionRecord) -> model.CaptureResult:
        if self.record_delay:
            time.sleep(self.record_delay)
        with self._lock:
            if self.closed:
                raise RuntimeError("record on a closed engine")
            key = (tenant, record.request_id)
            if record.request_id and key in self.results:
                first = self.results[key]
                return model.CaptureResult(**{**first.__dict__, "replayed": True})
            result = self._apply(tenant, record)
            self.records_applied += 1
            if record.request_id:
                self.results[key] = result
            return result

    def _apply(self, tenant: str, record: model.ExecutionRecord) -> model.CaptureResult:
        pid = hashlib.sha256(record.code.encode()).hexdigest()[:16]
        tools = tuple(c.tool for c in record.tool_calls if c.ok)
        cid = hashlib.sha256("|".join(tools).encode()).hexdigest()[:12]
        failed = tuple(model.ToolFailure(c.tool, c.error) for c in record.tool_calls if not c.ok)
        now = int(time.time() * 1000)
        store = self.patterns.setdefault(tenant, {})
        for f in failed:
            self.failures.setdefault(tenant, []).append(
                model.FailureEntry(
                    record.request_id,
                    f.tool,
                    f.error,
                    record.intent,
                    pid,
                    pid if pid in store else "",
                    now,
                )
            )
        old = store.get(pid)
        if old is None and failed:
            self.rejected[tenant] = self.rejected.get(tenant, 0) + 1
            return model.CaptureResult(model.CaptureOutcome.REJECTED, tool_failures=failed)
        if old is None:
            store[pid] = model.PatternView(
                id=pid,
                code_hash="sha256:" + pid,
                template=record.code,
                original_code=record.code,
                language=record.language,
                tools_used=tools,
                params=(),
                parameter_schema_json="{}",
                usage_count=1,
                success_count=1,
                failure_count=0,
                first_seen_ms=now,
                last_used_ms=now,
                mean_duration_ms=record.duration_ms,
                capability_id=cid,
                intents=(model.IntentView("i-" + pid, record.intent, 1, now),),
            )
            return model.CaptureResult(model.CaptureOutcome.SAVED, pid, cid, new_pattern=True)
        ok = 0 if failed else 1
        store[pid] = model.PatternView(
            **{
                **old.__dict__,
                "usage_count": old.usage_count + 1,
                "success_count": old.success_count + ok,
                "failure_count": old.failure_count + 1 - ok,
                "last_used_ms": now,
            }
        )
        return model.CaptureResult(
            model.CaptureOutcome.COUNTED, pid, old.capability_id, tool_failures=failed
        )

    def suggest(self, tenant: str, query: model.SuggestQuery) -> model.SuggestResult:
        words = set(query.intent.lower().split())
        scored = []
        for p in self.patterns.get(tenant, {}).values():
            overlap = len(words & set(p.intents[0].text.lower().split())) / max(len(words), 1)
            if overlap > 0:
                rate = p.success_count / p.usage_count
                parts = model.ScoreParts(
                    overlap, overlap, overlap, rate, 1.0, 1.0, 1.0, overlap * rate
                )
                scored.append(model.Suggestion(p.capability_id, p, parts))
        scored.sort(key=lambda s: -s.score.total)
        return model.SuggestResult(tuple(scored[: query.k]))

    def get_pattern(self, tenant: str, pattern_id: str) -> model.PatternView:
        try:
            return self.patterns.get(tenant, {})[pattern_id]
        except KeyError:
            raise NotFoundError(f"pattern {pattern_id} not found") from None

    def _capabilities(self, tenant: str) -> dict[str, model.CapabilityView]:
        groups: dict[str, list[model.PatternView]] = {}
        for p in self.patterns.get(tenant, {}).values():
            groups.setdefault(p.capability_id, []).append(p)
        return {
            cid: model.CapabilityView(
                cid,
                ps[0].tools_used,
                tuple(p.id for p in ps),
                ps[0].id,
                tuple(p.intents[0].text for p in ps),
                sum(p.usage_count for p in ps),
                sum(p.success_count for p in ps),
                sum(p.failure_count for p in ps),
                max(p.last_used_ms for p in ps),
            )
            for cid, ps in sorted(groups.items())
        }

    def get_capability(self, tenant: str, capability_id: str) -> model.CapabilityView:
        try:
            return self._capabilities(tenant)[capability_id]
        except KeyError:
            raise NotFoundError(f"capability {capability_id} not found") from None

    @staticmethod
    def _paginate(items: list[model.T], page: model.PageRequest) -> model.Page[model.T]:
        start = int(page.cursor or 0)
        end = start + page.page_size
        return model.Page(tuple(items[start:end]), str(end) if end < len(items) else "")

    def list_patterns(self, tenant: str, page: model.PageRequest) -> model.Page[model.PatternView]:
        items = sorted(self.patterns.get(tenant, {}).values(), key=lambda p: p.id)
        return self._paginate(items, page)

    def list_capabilities(
        self, tenant: str, page: model.PageRequest
    ) -> model.Page[model.CapabilityView]:
        return self._paginate(list(self._capabilities(tenant).values()), page)

    def delete_pattern(self, tenant: str, pattern_id: str) -> None:
        if self.patterns.get(tenant, {}).pop(pattern_id, None) is None:
            raise NotFoundError(f"pattern {pattern_id} not found")

    def delete_capability(self, tenant: str, capability_id: str) -> None:
        store = self.patterns.get(tenant, {})
        doomed = [pid for pid, p in store.items() if p.capability_id == capability_id]
        if not doomed:
            raise NotFoundError(f"capability {capability_id} not found")
        for pid in doomed:
            del store[pid]

    def list_failures(self, tenant: str, page: model.PageRequest) -> model.Page[model.FailureEntry]:
        return self._paginate(list(reversed(self.failures.get(tenant, []))), page)

    def run_retention(self, tenant: str, apply: bool) -> model.RetentionReport:
        entries = tuple(
            model.RetentionEntry(p.id, model.RetentionAction.REMOVAL_CANDIDATE, "low success")
            for p in self.patterns.get(tenant, {}).values()
            if p.usage_count >= 10 and p.success_count / p.usage_count < 0.2
        )
        return model.RetentionReport(not apply, entries, int(time.time() * 1000))

    def stats(self, tenant: str) -> model.Stats:
        ps = self.patterns.get(tenant, {}).values()
        return model.Stats(
            patterns=len(ps),
            capabilities=len(self._capabilities(tenant)),
            intents=sum(len(p.intents) for p in ps),
            executions=sum(p.usage_count for p in ps),
            rejected=self.rejected.get(tenant, 0),
            failures_logged=len(self.failures.get(tenant, [])),
        )
