"""Tenant isolation: a hypothesis state machine drives three tenants of one real server process
(multi-tenant, a key each) through random captures (some failing), suggestions, paged listings
of patterns, capabilities and failures, gets and deletes (of its own and of other tenants'
names), stats and tampered page tokens. Every tenant's data carries a marker; a leak is any
answer to one tenant that contains another tenant's marker, lists or counts anything that is
not the caller's, or deletes another tenant's pattern. Expected: 0 leaks."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.auth import Role, add_key
from tests.reliability.harness import ServerProcess, report

TENANTS = ("acme", "globex", "initech")
MARKERS = {"acme": "qzacmeqz", "globex": "qzglobexqz", "initech": "qzinitechqz"}
FIGURES: Counter[str] = Counter()


@dataclass
class TenantModel:
    """What one tenant did, as the server should see it."""

    patterns: dict[int, str] = field(default_factory=dict)  # pattern key -> resource name
    executions: int = 0
    rejected: int = 0
    failed_runs: int = 0


@dataclass
class World:
    server: ServerProcess
    stubs: dict[str, pml_pb2_grpc.PmlServiceStub]
    metadata: dict[str, tuple[tuple[str, str], ...]]
    models: dict[str, TenantModel]
    channel: grpc.Channel


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("tenants")
    keys_file = root / "keys.json"
    keys = {t: add_key(keys_file, t, Role.ADMIN) for t in TENANTS}
    server = ServerProcess(root / "data", "--durability", "fast", "--keys-file", str(keys_file))
    server.start()
    channel = grpc.insecure_channel(server.target)
    stub = pml_pb2_grpc.PmlServiceStub(channel)
    yield World(
        server=server,
        stubs=dict.fromkeys(TENANTS, stub),
        metadata={t: (("authorization", f"Bearer {keys[t]}"),) for t in TENANTS},
        models={t: TenantModel() for t in TENANTS},
        channel=channel,
    )
    channel.close()
    server.terminate()


def _record(tenant: str, key: int, failed: bool, salt: int) -> resources_pb2.ExecutionRecord:
    marker = MARKERS[tenant]
    tools = [f"{marker}_open{key}", f"{marker}_save{key}"]
    code = "\n".join(f'await mcp.{t}({{path: "/{marker}/{salt}"}});' for t in tools)
    calls = [
        resources_pb2.ToolCall(
            tool=t, ok=not (failed and i == 1), error=f"{marker} disk full" if failed and i else "",
            arguments_json=f'{{"path": "/{marker}/{salt}"}}',
        )
        for i, t in enumerate(tools)
    ]
    return resources_pb2.ExecutionRecord(
        request_id=f"{tenant}-{random.getrandbits(64):x}",
        intent=f"archive the {marker} ledger number {key}",
        code=code, language="javascript", tool_calls=calls,
        status=resources_pb2.EXECUTION_STATUS_FAILURE if failed
        else resources_pb2.EXECUTION_STATUS_SUCCESS,
    )


class TenantMachine(RuleBasedStateMachine):
    world: World

    @initialize()
    def start(self) -> None:
        FIGURES["machines"] += 1

    def _call(self, tenant: str, method: str, request: object) -> object:
        FIGURES["calls"] += 1
        reply = getattr(self.world.stubs[tenant], method)(
            request, metadata=self.world.metadata[tenant], timeout=30
        )
        self._assert_no_foreign_marker(tenant, method, reply.SerializeToString())
        return reply

    def _fails(self, tenant: str, method: str, request: object) -> grpc.StatusCode:
        try:
            self._call(tenant, method, request)
        except grpc.RpcError as err:
            self._assert_no_foreign_marker(tenant, method, (err.details() or "").encode())
            return err.code()
        return grpc.StatusCode.OK

    @staticmethod
    def _assert_no_foreign_marker(tenant: str, method: str, data: bytes) -> None:
        for other, marker in MARKERS.items():
            if other != tenant and marker.encode() in data:
                FIGURES["leaks"] += 1
                raise AssertionError(f"LEAK: {method} answered {tenant} with {other}'s data")

    @rule(tenant=st.sampled_from(TENANTS), key=st.integers(0, 3), failed=st.booleans(),
          salt=st.integers(0, 5))
    def capture(self, tenant: str, key: int, failed: bool, salt: int) -> None:
        model = self.world.models[tenant]
        reply = self._call(tenant, "RecordExecution",
                           pml_pb2.RecordExecutionRequest(record=_record(tenant, key, failed, salt)))
        result = reply.result  # type: ignore[attr-defined]
        model.failed_runs += failed
        if failed and key not in model.patterns:
            assert result.outcome == resources_pb2.CAPTURE_OUTCOME_REJECTED
            model.rejected += 1
            return
        model.executions += 1
        if key not in model.patterns:
            model.patterns[key] = result.pattern
        assert result.pattern == model.patterns[key]

    @rule(tenant=st.sampled_from(TENANTS), about=st.sampled_from(TENANTS), key=st.integers(0, 3))
    def suggest(self, tenant: str, about: str, key: int) -> None:
        FIGURES["cross_tenant_probes"] += tenant != about
        self._call(tenant, "Suggest", pml_pb2.SuggestRequest(
            intent=f"archive the {MARKERS[about]} ledger number {key}", page_size=20,
            explain=True, include_flagged=True,
        ))

    def _list_all(self, tenant: str, method: str, request_type: type, size: int) -> list[object]:
        items: list[object] = []
        token = ""
        for _ in range(1000):
            reply = self._call(tenant, method, request_type(page_size=size, page_token=token))
            items += list(getattr(reply, reply.DESCRIPTOR.fields[0].name))
            token = reply.next_page_token  # type: ignore[attr-defined]
            if not token:
                return items
        raise AssertionError(f"{method} never ended")

    @rule(tenant=st.sampled_from(TENANTS), size=st.integers(1, 3))
    def list_patterns(self, tenant: str, size: int) -> None:
        got = {p.name for p in self._list_all(tenant, "ListPatterns", pml_pb2.ListPatternsRequest,
                                               size)}  # type: ignore[attr-defined]
        assert got == set(self.world.models[tenant].patterns.values())

    @rule(tenant=st.sampled_from(TENANTS), size=st.integers(1, 3))
    def list_capabilities_and_failures(self, tenant: str, size: int) -> None:
        self._list_all(tenant, "ListCapabilities", pml_pb2.ListCapabilitiesRequest, size)
        failures = self._list_all(tenant, "ListFailures", pml_pb2.ListFailuresRequest, size)
        assert len(failures) == self.world.models[tenant].failed_runs

    @rule(owner=st.sampled_from(TENANTS), thief=st.sampled_from(TENANTS), flip=st.integers(0, 200))
    def tampered_or_foreign_token(self, owner: str, thief: str, flip: int) -> None:
        reply = self._call(owner, "ListFailures", pml_pb2.ListFailuresRequest(page_size=1))
        token = reply.next_page_token  # type: ignore[attr-defined]
        if not token:
            return
        if thief == owner:  # the owner's own token, one byte changed
            raw = bytearray(token.encode())
            raw[flip % len(raw)] ^= 0x01
            token = raw.decode(errors="replace")
        FIGURES["tampered_tokens"] += 1
        code = self._fails(thief, "ListFailures",
                           pml_pb2.ListFailuresRequest(page_size=1, page_token=token))
        assert code is grpc.StatusCode.INVALID_ARGUMENT

    @rule(tenant=st.sampled_from(TENANTS), owner=st.sampled_from(TENANTS), key=st.integers(0, 3),
          delete=st.booleans())
    def get_or_delete(self, tenant: str, owner: str, key: int, delete: bool) -> None:
        name = self.world.models[owner].patterns.get(key)
        if name is None:
            return
        FIGURES["cross_tenant_probes"] += tenant != owner
        mine = self.world.models[tenant]
        own_key = next((k for k, n in mine.patterns.items() if n == name), None)
        if delete:
            code = self._fails(tenant, "DeletePattern", pml_pb2.DeletePatternRequest(name=name))
            if own_key is not None:
                del mine.patterns[own_key]
        else:
            code = self._fails(tenant, "GetPattern", pml_pb2.GetPatternRequest(name=name))
        expected = grpc.StatusCode.OK if own_key is not None else grpc.StatusCode.NOT_FOUND
        assert code is expected, f"{tenant} on {owner}'s {name}: {code.name}"

    @invariant()
    def stats_count_only_the_callers_data(self) -> None:
        for tenant, model in self.world.models.items():
            stats = self._call(tenant, "GetStats", pml_pb2.GetStatsRequest())
            got = (stats.executions, stats.rejected, stats.patterns)  # type: ignore[attr-defined]
            assert got == (model.executions, model.rejected, len(model.patterns)), tenant


@pytest.mark.slow
def test_random_operations_never_leak_across_tenants(world: World) -> None:
    TenantMachine.world = world
    run = settings(max_examples=25, stateful_step_count=30, deadline=None,
                   suppress_health_check=list(HealthCheck))(TenantMachine.TestCase)
    try:
        run().runTest()
    finally:
        summary = report("tenant_isolation", {**FIGURES, "leaks": FIGURES["leaks"]})
    assert FIGURES["leaks"] == 0, summary
    assert FIGURES["cross_tenant_probes"] > 0, summary


