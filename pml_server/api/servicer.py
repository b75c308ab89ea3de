"""PmlService implementation: authenticate, validate and convert, call the engine, convert back.

Every method raises domain errors only; `interceptor.ApiInterceptor` turns them into statuses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

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

_Item = TypeVar("_Item")
_Message = TypeVar("_Message")


class _ListRequest(Protocol):
    """What every List* request has: the page asked for."""

    @property
    def page_size(self) -> int: ...
    @property
    def page_token(self) -> str: ...


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

    def _listing(
        self,
        caller: Caller,
        kind: str,
        request: _ListRequest,
        fetch: Callable[[model.PageRequest], model.Page[_Item]],
        to_proto: Callable[[Sequence[_Item], str], tuple[list[_Message], str]],
    ) -> tuple[list[_Message], str]:
        """One page of a listing and the token of the next: the request's token is decoded and
        the next one encoded under the same `kind` (a token of one listing fits no other), the
        engine's page (`fetch`) turned into messages and the cursor after the last one kept."""
        cursor = self._d.tokens.decode(caller.tenant, kind, request.page_token)
        page = fetch(
            model.PageRequest(page_size=validate.page_size(request.page_size), cursor=cursor)
        )
        messages, after = to_proto(page.items, page.next_cursor)
        return messages, self._d.tokens.encode(caller.tenant, kind, after)

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
            intents, token = self._listing(
                caller,
                f"intents/{pattern_id}",  # a token of one pattern's listing fits no other
                request,
                lambda page: self._engine.pattern_intents(caller.tenant, pattern_id, page),
                convert.intent_page,
            )
            return pml_pb2.ListPatternIntentsResponse(intents=intents, next_page_token=token)

    def ListPatterns(
        self, request: pml_pb2.ListPatternsRequest, context: grpc.ServicerContext
    ) -> pml_pb2.ListPatternsResponse:
        with self._call(context, Role.READ) as caller:
            capability_id = (
                validate.resource_id(request.capability, convert.CAPABILITIES, "capability")
                if request.capability
                else ""
            )
            patterns, token = self._listing(
                caller,
                # a token of one capability's listing fits no other listing
                f"patterns/{capability_id}" if capability_id else "patterns",
                request,
                lambda page: self._engine.list_patterns(caller.tenant, page, capability_id),
                convert.pattern_page,
            )
            return pml_pb2.ListPatternsResponse(patterns=patterns, next_page_token=token)

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
            capabilities, token = self._listing(
                caller,
                "capabilities",
                request,
                lambda page: self._engine.list_capabilities(caller.tenant, page),
                convert.capability_page,
            )
            return pml_pb2.ListCapabilitiesResponse(
                capabilities=capabilities, next_page_token=token
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
            failures, token = self._listing(
                caller,
                "failures",
                request,
                lambda page: self._engine.list_failures(caller.tenant, page),
                lambda items, cursor: ([convert.failure(f) for f in items], cursor),
            )
            return pml_pb2.ListFailuresResponse(failures=failures, next_page_token=token)

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
