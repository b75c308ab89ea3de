"""Sessions' last successful steps and the transitions between capabilities they make
(docs/ranking.md, Sessions)."""

from __future__ import annotations

from collections.abc import Sequence

from pml_server.domain import json_form
from pml_server.domain.sessions import DIGEST_CHARS, session_digest
from pml_server.storage.keys import (
    CF_SESSIONS,
    CF_TRANSITIONS,
    split_tenant,
    tenant_key,
    tenant_prefix,
)
from pml_server.storage.seam import Op, StoreBackend

_HEX = b"0123456789abcdef"
_PAGE = 1000  # transitions read at a time when looking for a capability's


def session_key(tenant: str, session_id: str) -> bytes:
    """The key of a session's row: a digest of its id, never the id (docs/ranking.md,
    Sessions: a client may name a session with a token or a URL holding a password, and the id
    is only ever looked up, never listed)."""
    return tenant_key(tenant, session_digest(session_id))


class SessionRows:
    def __init__(self, store: StoreBackend) -> None:
        self.store = store

    def session_step(self, tenant: str, session_id: str) -> tuple[str, int] | None:
        """(capability id, time in ms) of the session's last successful step, if kept."""
        raw = self.store.get(CF_SESSIONS, session_key(tenant, session_id))
        if raw is None:
            return None
        data = json_form.loads(raw)
        return str(data["capability"]), int(data["ms"])

    def put_session_step(self, tenant: str, session_id: str, capability_id: str, ms: int) -> Op:
        value = json_form.dumps({"capability": capability_id, "ms": ms})
        return (CF_SESSIONS, session_key(tenant, session_id), value)

    def key(self, tenant: str, session_id: str) -> bytes:
        return session_key(tenant, session_id)

    def session_rows(self, tenant: str) -> list[tuple[bytes, int, bytes]]:
        """(key, last step time, stored row) of every session kept for the tenant."""
        rows = self.store.scan(CF_SESSIONS, tenant_prefix(tenant))
        return [(key, int(json_form.loads(raw)["ms"]), raw) for key, raw in rows]

    def delete_unchanged(self, rows: Sequence[tuple[bytes, int, bytes]]) -> int:
        """Delete, in one write, the `session_rows` rows still as they were read; how many."""
        return self.store.delete_unchanged(CF_SESSIONS, [(key, raw) for key, _, raw in rows])

    def rows_keyed_by_id(self) -> list[Op]:
        """The deletion of every session row of any tenant still keyed by its raw id (an older
        build wrote them; the id may hold a secret). Such a session's next step counted no
        transition already: it is looked up by its digest now."""
        ops: list[Op] = []
        for key, _ in self.store.scan(CF_SESSIONS, b""):
            rest = split_tenant(key)[1]
            if len(rest) != DIGEST_CHARS or rest.strip(_HEX):
                ops.append((CF_SESSIONS, key, None))
        return ops

    def transition(self, tenant: str, previous: str, following: str) -> tuple[int, int] | None:
        """(count, last time in ms) of `previous` -> `following`, if ever seen."""
        raw = self.store.get(CF_TRANSITIONS, tenant_key(tenant, previous, following))
        if raw is None:
            return None
        data = json_form.loads(raw)
        return int(data["count"]), int(data["ms"])

    def put_transition(self, tenant: str, previous: str, following: str, count: int, ms: int) -> Op:
        value = json_form.dumps({"count": count, "ms": ms})
        return (CF_TRANSITIONS, tenant_key(tenant, previous, following), value)

    def transitions_from(
        self, tenant: str, previous: str, limit: int
    ) -> list[tuple[str, int, int]]:
        """(next capability id, count, last time in ms) of at most `limit` transitions out of
        `previous`, in key order."""
        prefix = tenant_key(tenant, previous, b"")
        rows = self.store.scan(CF_TRANSITIONS, prefix, limit=limit)
        out = []
        for key, raw in rows:
            data = json_form.loads(raw)
            out.append((key[len(prefix) :].decode(), int(data["count"]), int(data["ms"])))
        return out

    def delete_transition(self, tenant: str, previous: str, following: str) -> Op:
        return (CF_TRANSITIONS, tenant_key(tenant, previous, following), None)

    def transitions_naming(
        self, tenant: str, capability_id: str
    ) -> list[tuple[str, str, int, int]]:
        """(previous, following, count, last time in ms) of every transition of the tenant
        into or out of `capability_id`: all of the tenant's are read, a page at a time."""
        prefix = tenant_prefix(tenant)
        found: list[tuple[str, str, int, int]] = []
        start: bytes | None = None
        while True:
            rows = self.store.scan(CF_TRANSITIONS, prefix, start=start, limit=_PAGE)
            for key, raw in rows:
                previous, following = (p.decode() for p in key[len(prefix) :].split(b"\x00", 1))
                if capability_id in (previous, following):
                    data = json_form.loads(raw)
                    found.append((previous, following, int(data["count"]), int(data["ms"])))
            if len(rows) < _PAGE:
                return found
            start = rows[-1][0] + b"\x00"
