"""PmlService implementation: authenticate, validate and convert, call the engine, convert back.

Every method raises domain errors only; `interceptor.ApiInterceptor` turns them into statuses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import grpc

from pml_server import __version__, _core
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.api import convert, validate
from pml_server.api.admission.fairness import CpuFairness
from pml_server.api.admission.quotas import TenantQuotas
from pml_server.api.admission.stream_slots import StreamSlots
from pml_server.api.security.auth import Caller, KeyStore, Role
from pml_server.api.security.page_tokens import PageTokens
from pml_server.api.stream import TraceStream
from pml_server.domain import model
from pml_server.domain.engine import EngineProtocol
from pml_server.domain.errors import UnauthenticatedError, UnavailableError
from pml_server.domain.limits import Limits


@dataclass
class ServiceDeps:
    engine: EngineProtocol
    keys: KeyStore
    tokens: PageTokens
    limits: Limits
    capture_pool: ThreadPoolExecutor
    quotas: TenantQuotas
    stream_window: int = 64
    streams: StreamSlots | None = None  # None: unbounded (tests of the API layer only)
    stream_idle_seconds: float = 60.0
    schema_version: int = 0
    on_capture: Callable[[model.CaptureResult], None] | None = None
    fairness: CpuFairness | None = None  # None: calls are not scheduled by CPU cost
    max_message_bytes: int = 0  # what GetServerInfo tells clients (0: not said)


class PmlServicer(pml_pb2_grpc.PmlServiceServicer):
    def __init__(self, deps: ServiceDeps) -> None:
        self._d = deps
        self.deps = deps  # shared with the OTLP ingest servicer (api/otlp.py)
        self._engine = deps.engine
        self._dim = deps.engine.embedding_dim()
        self.draining = threading.Event()

    # ---- helpers -----------------------------------------------------------------------------

    @contextmanager
    def _call(
        self, context: grpc.ServicerContext, role: Role, *, scheduled: bool = True
    ) -> Iterator[Caller]:
        """Authenticate, check the role, hold one of the tenant's call slots, and (unary calls)
        give way to lighter tenants once the call is long (`fairness`)."""
        if self.draining.is_set():
            raise UnavailableError("the server is shutting down; retry on another instance")
        caller = self._d.keys.require(context.invocation_metadata(), role)
        with self._d.quotas.hold(caller.tenant):
            if self._d.fairness is None or not scheduled:
                yield caller
                return
            with self._d.fairness.call(caller.tenant):
                yield caller

    @contextmanager
    def _stream_slot(self, context: grpc.ServicerContext) -> Iterator[None]:
        if self._d.streams is None:
            yield
            return
        with self._d.streams.hold(context.peer()):
            yield

    def _captured(self, result: model.CaptureResult) -> model.CaptureResult:
        if self._d.on_capture is not None:
            self._d.on_capture(result)
        return result

    def _page(self, caller: Caller, kind: str, size: int, token: str) -> model.PageRequest:
        cursor = self._d.tokens.decode(caller.tenant, kind, token)
        return model.PageRequest(page_size=validate.page_size(size), cursor=cursor)

    # ---- RPCs --------------------------------------------------------------------------------

    def GetServerInfo(
        self, request: pml_pb2.GetServerInfoRequest, context: grpc.ServicerContext
    ) -> pml_pb2.GetServerInfoResponse:
        with self._call(context, Role.READ) as caller:
            return pml_pb2.GetServerInfoResponse(
                server_version=__version__,
                core_version=_core.__version__,
                schema_version=self._d.schema_version,
                embedding_dimension=self._dim,
                tenant=caller.tenant,
                role=caller.role.name.lower(),
                stream_batch_limit=self._d.limits.stream_batch.bound,
                max_message_bytes=self._d.max_message_bytes,
            )

    def RecordExecution(
        self, request: pml_pb2.RecordExecutionRequest, context: grpc.ServicerContext
    ) -> pml_pb2.RecordExecutionResponse:
        with self._call(context, Role.WRITE) as caller:
            record = convert.execution_record(request.record, "record", self._d.limits, self._dim)
            result = self._captured(self._engine.record(caller.tenant, record))
            return pml_pb2.RecordExecutionResponse(result=convert.capture_result(result))

    def StreamTraces(
        self,
        request_iterator: Iterator[pml_pb2.StreamTracesRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[pml_pb2.StreamTracesResponse]:
        # not scheduled: a stream lives for minutes, its captures run on the capture pool
        with self._call(context, Role.WRITE, scheduled=False) as caller, self._stream_slot(context):
            metadata = context.invocation_metadata()

            def authorize() -> None:
                """Each message: the key still allows writing, for the same tenant (a key
                revoked while its stream was open went on writing for as long as the stream
                lived, though every unary call with it was refused within a second)."""
                if self._d.keys.require(metadata, Role.WRITE).tenant != caller.tenant:
                    raise UnauthenticatedError("the API key now belongs to another tenant")

            stream = TraceStream(
                self._engine,
                caller.tenant,
                self._d.limits,
                self._d.capture_pool,
                self._d.stream_window,
                on_capture=self._d.on_capture,
                draining=self.draining,
                idle_seconds=self._d.stream_idle_seconds,
                authorize=authorize,
            )
            for ack in stream.run(request_iterator):
                assert isinstance(ack, pml_pb2.StreamTracesResponse)
                yield ack

    def Suggest(
        self, request: pml_pb2.SuggestRequest, context: grpc.ServicerContext
    ) -> pml_pb2.SuggestResponse:
        with self._call(context, Role.READ) as caller:
            query = convert.suggest_query(request, self._d.limits, self._dim)
            return convert.suggest_response(self._engine.suggest(caller.tenant, query))

    def GetPattern(
        self, request: pml_pb2.GetPatternRequest, context: grpc.ServicerContext
    ) -> pml_pb2.GetPatternResponse:
        with self._call(context, Role.READ) as caller:
            pattern_id = validate.resource_id(request.name, convert.PATTERNS)
            view = self._engine.get_pattern(caller.tenant, pattern_id)
            return pml_pb2.GetPatternResponse(pattern=convert.got_pattern(view))

    def ListPatternIntents(
        self, request: pml_pb2.ListPatternIntentsRequest, context: grpc.ServicerContext
    ) -> pml_pb2.ListPatternIntentsResponse:
        with self._call(context, Role.READ) as caller:
            pattern_id = validate.resource_id(request.parent, convert.PATTERNS, "parent")
            kind = f"intents/{pattern_id}"  # a token of one pattern's listing fits no other
            page = self._page(caller, kind, request.page_size, request.page_token)
            found = self._engine.pattern_intents(caller.tenant, pattern_id, page)
            intents, cursor = convert.intent_page(found.items, found.next_cursor)
            return pml_pb2.ListPatternIntentsResponse(
                intents=intents,
                next_page_token=self._d.tokens.encode(caller.tenant, kind, cursor),
            )

    def ListPatterns(
        self, request: pml_pb2.ListPatternsRequest, context: grpc.ServicerContext
    ) -> pml_pb2.ListPatternsResponse:
        with self._call(context, Role.READ) as caller:
            capability_id = (
                validate.resource_id(request.capability, convert.CAPABILITIES, "capability")
                if request.capability
                else ""
            )
            # a token of one capability's listing fits no other listing
            kind = f"patterns/{capability_id}" if capability_id else "patterns"
            page = self._engine.list_patterns(
                caller.tenant,
                self._page(caller, kind, request.page_size, request.page_token),
                capability_id,
            )
            patterns, cursor = convert.pattern_page(page.items, page.next_cursor)
            return pml_pb2.ListPatternsResponse(
                patterns=patterns,
                next_page_token=self._d.tokens.encode(caller.tenant, kind, cursor),
            )

    def DeletePattern(
        self, request: pml_pb2.DeletePatternRequest, context: grpc.ServicerContext
    ) -> pml_pb2.DeletePatternResponse:
        with self._call(context, Role.ADMIN) as caller:
            self._engine.delete_pattern(
                caller.tenant, validate.resource_id(request.name, convert.PATTERNS)
            )
            return pml_pb2.DeletePatternResponse()

    def GetCapability(
        self, request: pml_pb2.GetCapabilityRequest, context: grpc.ServicerContext
    ) -> pml_pb2.GetCapabilityResponse:
        with self._call(context, Role.READ) as caller:
            capability_id = validate.resource_id(request.name, convert.CAPABILITIES)
            view = self._engine.get_capability(caller.tenant, capability_id)
            return pml_pb2.GetCapabilityResponse(capability=convert.capability(view))

    def ListCapabilities(
        self, request: pml_pb2.ListCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pml_pb2.ListCapabilitiesResponse:
        with self._call(context, Role.READ) as caller:
            page = self._engine.list_capabilities(
                caller.tenant,
                self._page(caller, "capabilities", request.page_size, request.page_token),
            )
            capabilities, cursor = convert.capability_page(page.items, page.next_cursor)
            return pml_pb2.ListCapabilitiesResponse(
                capabilities=capabilities,
                next_page_token=self._d.tokens.encode(caller.tenant, "capabilities", cursor),
            )

    def DeleteCapability(
        self, request: pml_pb2.DeleteCapabilityRequest, context: grpc.ServicerContext
    ) -> pml_pb2.DeleteCapabilityResponse:
        with self._call(context, Role.ADMIN) as caller:
            self._engine.delete_capability(
                caller.tenant, validate.resource_id(request.name, convert.CAPABILITIES)
            )
            return pml_pb2.DeleteCapabilityResponse()

    def ListFailures(
        self, request: pml_pb2.ListFailuresRequest, context: grpc.ServicerContext
    ) -> pml_pb2.ListFailuresResponse:
        with self._call(context, Role.READ) as caller:
            page = self._engine.list_failures(
                caller.tenant, self._page(caller, "failures", request.page_size, request.page_token)
            )
            return pml_pb2.ListFailuresResponse(
                failures=[convert.failure(f) for f in page.items],
                next_page_token=self._d.tokens.encode(caller.tenant, "failures", page.next_cursor),
            )

    def RunRetention(
        self, request: pml_pb2.RunRetentionRequest, context: grpc.ServicerContext
    ) -> pml_pb2.RunRetentionResponse:
        with self._call(context, Role.ADMIN if request.apply else Role.READ) as caller:
            return convert.retention(self._engine.run_retention(caller.tenant, request.apply))

    def GetStats(
        self, request: pml_pb2.GetStatsRequest, context: grpc.ServicerContext
    ) -> pml_pb2.GetStatsResponse:
        with self._call(context, Role.READ) as caller:
            return convert.stats(self._engine.stats(caller.tenant))
