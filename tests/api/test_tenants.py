"""Two tenants on one server never see, count, page or delete each other's data, and cannot
learn that it exists (foreign ids answer exactly like ids that never existed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server.api.security.auth import KeyStore
from pml_server.client import PmlClient, PmlClientError, make_record
from tests.conftest import StartServer


def _code(err: pytest.ExceptionInfo[PmlClientError]) -> grpc.StatusCode:
    return err.value.code


def test_two_tenants_never_see_each_other(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    server = start(keys_file=path)
    target = f"127.0.0.1:{server.port}"
    with (
        PmlClient(target, api_key=found["acme-admin"]) as acme,
        PmlClient(target, api_key=found["globex-admin"]) as globex,
    ):
        assert acme.server_info().tenant == "acme"
        assert globex.server_info().tenant == "globex"
        mine = [
            acme.record(
                make_record(
                    f"Read JSON file {i}",
                    f"await mcp.read_file(file{i})",
                    tools=["read_file"],
                    request_id=f"same-{i}",
                )
            )
            for i in range(5)
        ]
        acme.record(make_record("Mail", "await mcp.gmail()", failed_tools=[("gmail", "down")]))
        # The same request id in another tenant is another request.
        theirs = globex.record(
            make_record(
                "Read JSON file 0",
                "await mcp.read_file(0)",
                tools=["read_file"],
                request_id="same-0",
            )
        )
        assert not theirs.replayed
        assert theirs.new_pattern

        g_stats = globex.stats()
        assert (g_stats.patterns, g_stats.executions, g_stats.failures_logged) == (1, 1, 0)
        assert acme.stats().patterns == 5
        assert [p.name for p in globex.iter_patterns()] == [theirs.pattern]
        assert len(list(globex.iter_capabilities())) == 1
        assert list(globex.list_failures().failures) == []
        suggested = {s.pattern.name for s in globex.suggest("Read JSON file", k=10).suggestions}
        assert suggested <= {theirs.pattern}
        assert globex.suggest("Read JSON file 3").suggestions[0].pattern.usage_count == 1

        # Foreign ids look exactly like ids that never existed.
        foreign = next(m.pattern for m in mine if m.pattern != theirs.pattern)
        for call in (
            lambda: globex.get_pattern(foreign),
            lambda: globex.delete_pattern(foreign),
            lambda: globex.get_pattern("patterns/never-existed"),
        ):
            with pytest.raises(PmlClientError) as err:
                call()
            assert _code(err) is grpc.StatusCode.NOT_FOUND
            assert "acme" not in err.value.message
        acme.get_pattern(foreign)  # still there

        # A page token is bound to its tenant.
        token = acme.list_patterns(page_size=2).next_page_token
        assert token
        with pytest.raises(PmlClientError) as err:
            globex.list_patterns(page_token=token)
        assert _code(err) is grpc.StatusCode.INVALID_ARGUMENT
        assert len(acme.list_patterns(page_size=2, page_token=token).patterns) == 2


def test_tenant_comes_from_the_key_only(keys: tuple[Path, dict[str, str]]) -> None:
    path, found = keys
    store = KeyStore.load(path)
    # Metadata cannot override the tenant: only the key is read.
    metadata = [("authorization", f"Bearer {found['globex-admin']}"), ("x-tenant", "acme")]
    assert store.authenticate(metadata).tenant == "globex"
    assert found["acme-admin"] not in path.read_text()  # only hashes are stored


def test_no_keys_file_refuses_a_public_listen(start: StartServer) -> None:
    with pytest.raises(ValueError, match="without a keys file"):
        start(listen="0.0.0.0:0")
    start(listen="0.0.0.0:0", allow_insecure_remote=True).stop(grace=0)


def test_a_key_revoked_while_its_stream_is_open_stops_writing(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """The key was checked once, when the stream opened: revoked, it was refused by every unary
    call within a second, yet its open stream went on capturing record after record. Now the
    next message ends the stream UNAUTHENTICATED and is not captured."""
    import queue

    from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
    from pml_server.api.security.auth import revoke_key

    path, found = keys
    server = start(keys_file=path)
    outbox: queue.Queue[pml_pb2.StreamTracesRequest | None] = queue.Queue()

    def requests() -> Iterator[pml_pb2.StreamTracesRequest]:
        while (message := outbox.get(timeout=30)) is not None:
            yield message

    def record(i: int) -> pml_pb2.StreamTracesRequest:
        rec = make_record(f"stream record {i}", f"await mcp.tool{i}()", tools=[f"tool{i}"])
        return pml_pb2.StreamTracesRequest(execution_id=f"e{i}", sequence=i, record=rec)

    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        metadata = [("authorization", f"Bearer {found['acme-write']}")]
        acks = pml_pb2_grpc.PmlServiceStub(channel).StreamTraces(
            requests(), metadata=metadata, timeout=30
        )
        outbox.put(record(1))
        assert next(acks).HasField("result")
        revoke_key(path, found["acme-write"])
        server.servicer.deps.keys.reload()
        outbox.put(record(2))
        with pytest.raises(grpc.RpcError) as ended:
            next(acks)
        outbox.put(None)
        assert ended.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    with PmlClient(f"127.0.0.1:{server.port}", api_key=found["acme-admin"]) as admin:
        assert admin.stats().patterns == 1
