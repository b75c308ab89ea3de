"""Tenant isolation: a hypothesis state machine drives three tenants of one real server process
(multi-tenant, a key each) through random captures (some failing), suggestions, paged listings
of patterns, capabilities and failures, gets and deletes (of its own and of other tenants'
names), stats and tampered page tokens. Every tenant's data carries a marker; a leak is any
answer to one tenant that contains another tenant's marker, lists or counts anything that is
not the caller's, or deletes another tenant's pattern. Expected: 0 leaks."""

from __future__ import annotations

import json
import random
import secrets
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.security.auth import hash_key
from testing.server_process import ServerProcess
from tests.reliability.report import report

PER_MACHINE = 3  # tenants in each generated scenario (fresh ones every time: no shared state)
SCENARIOS = 400
FIGURES: Counter[str] = Counter()


def marker(tenant: str) -> str:
    """Written into everything a tenant stores; found in another tenant's answer = a leak."""
    return f"qz{tenant}qz"


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
    stub: pml_pb2_grpc.PmlServiceStub
    keys: dict[str, str]  # tenant -> its API key
    used: int = 0

    def fresh_tenants(self) -> list[str]:
        names = [f"t{self.used + i}" for i in range(PER_MACHINE)]
        self.used += PER_MACHINE
        assert all(n in self.keys for n in names), "more scenarios than keys: raise SCENARIOS"
        return names


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("tenants")
    keys_file = root / "keys.json"
    keys = {f"t{i}": secrets.token_urlsafe(24) for i in range(SCENARIOS * PER_MACHINE)}
    entries = [{"sha256": hash_key(k), "tenant": t, "role": "admin"} for t, k in keys.items()]
    keys_file.write_text(json.dumps({"keys": entries}))
    server = ServerProcess(root / "data", "--durability", "fast", "--keys-file", str(keys_file))
    server.start()
    with grpc.insecure_channel(server.target) as channel:
        yield World(server=server, stub=pml_pb2_grpc.PmlServiceStub(channel), keys=keys)
    server.terminate()


def _record(tenant: str, key: int, failed: bool, salt: int) -> resources_pb2.ExecutionRecord:
    mark = marker(tenant)
    tools = [f"{mark}_open{key}", f"{mark}_save{key}"]
    code = "\n".join(f'await mcp.{t}({{path: "/{mark}/{salt}"}});' for t in tools)
    calls = [
        resources_pb2.ToolCall(
            tool=t,
            ok=not (failed and i == 1),
            error=f"{mark} disk full" if failed and i else "",
            arguments_json=f'{{"path": "/{mark}/{salt}"}}',
        )
        for i, t in enumerate(tools)
    ]
    return resources_pb2.ExecutionRecord(
        request_id=f"{tenant}-{random.getrandbits(64):x}",
        intent=f"archive the {mark} ledger number {key}",
        code=code,
        language="javascript",
        tool_calls=calls,
        status=resources_pb2.EXECUTION_STATUS_FAILURE
        if failed
        else resources_pb2.EXECUTION_STATUS_SUCCESS,
    )


TENANT = st.integers(0, PER_MACHINE - 1)


class TenantMachine(RuleBasedStateMachine):
    world: World

    def __init__(self) -> None:
        super().__init__()
        self.tenants = self.world.fresh_tenants()
        self.models = {t: TenantModel() for t in self.tenants}
        FIGURES["scenarios"] += 1

    def _call(self, tenant: str, method: str, request: object) -> object:
        FIGURES["calls"] += 1
        reply = getattr(self.world.stub, method)(
            request,
            metadata=(("authorization", f"Bearer {self.world.keys[tenant]}"),),
            timeout=30,
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

    def _assert_no_foreign_marker(self, tenant: str, method: str, data: bytes) -> None:
        for other in self.tenants:
            if other != tenant and marker(other).encode() in data:
                FIGURES["leaks"] += 1
                raise AssertionError(f"LEAK: {method} answered {tenant} with {other}'s data")

    @rule(tenant_no=TENANT, key=st.integers(0, 3), failed=st.booleans(), salt=st.integers(0, 5))
    def capture(self, tenant_no: int, key: int, failed: bool, salt: int) -> None:
        tenant = self.tenants[tenant_no]
        model = self.models[tenant]
        reply = self._call(
            tenant,
            "RecordExecution",
            pml_pb2.RecordExecutionRequest(record=_record(tenant, key, failed, salt)),
        )
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

    @rule(tenant_no=TENANT, about_no=TENANT, key=st.integers(0, 3))
    def suggest(self, tenant_no: int, about_no: int, key: int) -> None:
        tenant, about = self.tenants[tenant_no], self.tenants[about_no]
        FIGURES["cross_tenant_probes"] += tenant != about
        self._call(
            tenant,
            "Suggest",
            pml_pb2.SuggestRequest(
                intent=f"archive the {marker(about)} ledger number {key}",
                page_size=20,
                explain=True,
                include_flagged=True,
            ),
        )

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

    @rule(tenant_no=TENANT, size=st.integers(1, 3))
    def list_patterns(self, tenant_no: int, size: int) -> None:
        tenant = self.tenants[tenant_no]
        got = {
            p.name
            for p in self._list_all(tenant, "ListPatterns", pml_pb2.ListPatternsRequest, size)
        }  # type: ignore[attr-defined]
        assert got == set(self.models[tenant].patterns.values())

    @rule(tenant_no=TENANT, size=st.integers(1, 3))
    def list_capabilities_and_failures(self, tenant_no: int, size: int) -> None:
        tenant = self.tenants[tenant_no]
        self._list_all(tenant, "ListCapabilities", pml_pb2.ListCapabilitiesRequest, size)
        failures = self._list_all(tenant, "ListFailures", pml_pb2.ListFailuresRequest, size)
        assert len(failures) == self.models[tenant].failed_runs

    def _paging_tenants(self) -> list[str]:
        """Tenants holding two patterns or two failed runs: a listing of theirs one item a page
        hands out a page token. Drawn only among them, the token rule runs in most scenarios;
        drawn among all tenants it returned at once in every scenario of some runs."""
        return [
            t
            for t in self.tenants
            if len(self.models[t].patterns) >= 2 or self.models[t].failed_runs >= 2
        ]

    @precondition(lambda self: bool(self._paging_tenants()))
    @rule(owner_no=TENANT, thief_no=TENANT, flip=st.integers(0, 200))
    def tampered_or_foreign_token(self, owner_no: int, thief_no: int, flip: int) -> None:
        paging = self._paging_tenants()
        owner, thief = paging[owner_no % len(paging)], self.tenants[thief_no]
        token, method, request_type = "", "", type(None)
        for method, request_type in (  # the loop leaves the listing that paged
            ("ListFailures", pml_pb2.ListFailuresRequest),
            ("ListPatterns", pml_pb2.ListPatternsRequest),
            ("ListCapabilities", pml_pb2.ListCapabilitiesRequest),
        ):
            reply = self._call(owner, method, request_type(page_size=1))
            token = reply.next_page_token  # type: ignore[attr-defined]
            if token:
                break
        if not token:
            return
        if thief == owner:  # the owner's own token, one payload character changed (not the
            # last base64 character before the MAC: its low bits may be padding)
            raw = bytearray(token.encode())
            raw[flip % max(1, token.index(".") - 1)] ^= 0x01
            token = raw.decode(errors="replace")
        FIGURES["tampered_tokens"] += 1
        code = self._fails(thief, method, request_type(page_size=1, page_token=token))
        assert code is grpc.StatusCode.INVALID_ARGUMENT

    @rule(tenant_no=TENANT, owner_no=TENANT, key=st.integers(0, 3), delete=st.booleans())
    def get_or_delete(self, tenant_no: int, owner_no: int, key: int, delete: bool) -> None:
        tenant, owner = self.tenants[tenant_no], self.tenants[owner_no]
        name = self.models[owner].patterns.get(key)
        if name is None:
            return
        FIGURES["cross_tenant_probes"] += tenant != owner
        mine = self.models[tenant]
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
        for tenant, model in self.models.items():
            stats = self._call(tenant, "GetStats", pml_pb2.GetStatsRequest())
            got = (stats.executions, stats.rejected, stats.patterns)  # type: ignore[attr-defined]
            assert got == (model.executions, model.rejected, len(model.patterns)), tenant


@pytest.mark.slow
def test_random_operations_never_leak_across_tenants(world: World) -> None:
    TenantMachine.world = world
    try:
        run_state_machine_as_test(
            TenantMachine,
            settings=settings(
                max_examples=40,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        summary = report("tenant_isolation", {**FIGURES, "leaks": FIGURES["leaks"]})
    assert FIGURES["leaks"] == 0, summary
    assert FIGURES["cross_tenant_probes"] > 0, summary
    assert FIGURES["tampered_tokens"] > 0, summary
