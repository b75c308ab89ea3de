"""Capability records, and the link from a tool signature to the capabilities with it
(capability grouping, service/_grouping.py)."""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Sequence

from pml_server.domain.records import CapabilityRecord
from pml_server.storage.codec import encode_capability
from pml_server.storage.keys import CF_CAP_BY_TOOLS, CF_CAPABILITIES, tenant_key, tenant_prefix
from pml_server.storage.seam import KeyValueReads, Op


def tools_digest(tools: Sequence[str]) -> str:
    if sum(map(sys.getsizeof, tools)) > _MEMO_SIGNATURE_BYTES:
        return _digest(tuple(tools))
    return _digest_of(tuple(tools))


# Signatures memoized are at most this large (their names' str objects): tool names are the
# clients' (256 characters, 256 calls a record), and 4,096 of the largest kept over 300 MB
# alive; within it, about 20 MB (docs/operations.md, "Limits, keepalive and shutdown").
_MEMO_SIGNATURE_BYTES = 4096


# A new pattern needs its signature's digest three times (group lock, grouping scan, link key);
# signatures repeat, and a hash object costs more than the lookup.
@functools.lru_cache(maxsize=4096)
def _digest_of(tools: tuple[str, ...]) -> str:
    return _digest(tools)


def _digest(tools: tuple[str, ...]) -> str:
    return hashlib.sha256("\x1f".join(tools).encode()).hexdigest()[:32]


class CapabilityRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def capability(self, tenant: str, capability_id: str) -> CapabilityRecord | None:
        raw = self.store.get(CF_CAPABILITIES, tenant_key(tenant, capability_id))
        return None if raw is None else CapabilityRecord.from_json(raw)

    def kept(self, tenant: str, capability_ids: Sequence[str]) -> set[str]:
        """Those of `capability_ids` that still exist (one multi-get)."""
        keys = [tenant_key(tenant, c) for c in capability_ids]
        found = self.store.get_many(CF_CAPABILITIES, keys)
        return {c for c, raw in zip(capability_ids, found, strict=True) if raw is not None}

    def put_capability(self, tenant: str, record: CapabilityRecord) -> list[Op]:
        link = tenant_key(tenant, tools_digest(record.tools), record.id)
        return [
            (CF_CAPABILITIES, tenant_key(tenant, record.id), encode_capability(record)),
            (CF_CAP_BY_TOOLS, link, b""),
        ]

    def delete_capability(self, tenant: str, record: CapabilityRecord) -> list[Op]:
        link = tenant_key(tenant, tools_digest(record.tools), record.id)
        return [
            (CF_CAPABILITIES, tenant_key(tenant, record.id), None),
            (CF_CAP_BY_TOOLS, link, None),
        ]

    def capabilities_with_tools(self, tenant: str, tools: Sequence[str]) -> list[str]:
        prefix = tenant_key(tenant, tools_digest(tools), b"")
        return [key[len(prefix) :].decode() for key, _ in self.store.scan(CF_CAP_BY_TOOLS, prefix)]

    def capabilities_page(
        self, tenant: str, after: str, size: int
    ) -> tuple[list[CapabilityRecord], str]:
        prefix = tenant_prefix(tenant)
        start = tenant_key(tenant, after) + b"\x00" if after else None
        rows = self.store.scan(CF_CAPABILITIES, prefix, start=start, limit=size + 1)
        records = [CapabilityRecord.from_json(v) for _, v in rows[:size]]
        return records, (records[-1].id if len(rows) > size else "")
