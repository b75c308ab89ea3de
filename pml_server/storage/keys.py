"""Key layout of the RocksDB store: column family names and tenant-prefixed keys.

Every tenant-owned key starts with the tenant's UTF-8 bytes preceded by their length as a
big-endian u16. A length prefix (rather than a separator) means no tenant name can be a prefix
of another tenant's key range: "ab" + "c..." and "a" + "bc..." encode differently, so a prefix
scan of one tenant can never read another's rows.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence

from pml_server.storage.seam import Op

# Column families. Values are JSON (UTF-8) unless noted.
CF_PATTERNS = "patterns"  # tenant|pattern_id -> pattern record (template, code, tools, flags)
CF_HASHES = "hashes"  # tenant|code_hash -> pattern_id (the dedup key of rule 3)
CF_INTENTS = "intents"  # tenant|pattern_id|intent_id(u64) -> intent mapping + vector
CF_CAPABILITIES = "capabilities"  # tenant|capability_id -> capability record (member links)
CF_CAP_BY_TOOLS = "cap_by_tools"  # tenant|tools_digest|capability_id -> b"" (grouping lookup)
CF_COUNTERS = "counters"  # tenant|pattern_id -> counters, recent values, failure signatures
CF_FAILURES = "failures"  # tenant|seq(u64) -> failure log entry (bounded per tenant)
CF_REQUESTS = "requests"  # tenant|request_id -> first CaptureResult (idempotency)
CF_OPLOG = "oplog"  # seq(u64) -> vector index operation, replayed after the last snapshot
CF_AUDIT = "audit"  # tenant|seq(u64) -> retention/deletion action
CF_META = "meta"  # schema version, model id, id allocators, per-tenant stats, index snapshots
# Sessions (docs/ranking.md, Sessions):
CF_SESSIONS = "sessions"  # tenant|digest of session_id -> its last step (capability, time)
CF_TRANSITIONS = "transitions"  # tenant|capability|next capability -> count, last time

COLUMN_FAMILIES = (
    CF_PATTERNS,
    CF_HASHES,
    CF_INTENTS,
    CF_CAPABILITIES,
    CF_CAP_BY_TOOLS,
    CF_COUNTERS,
    CF_FAILURES,
    CF_REQUESTS,
    CF_OPLOG,
    CF_AUDIT,
    CF_META,
    CF_SESSIONS,
    CF_TRANSITIONS,
)

# Pseudo-family of a stored answer rewritten in place only if it is still as read
# (`RequestRows.rewrite_request`): its value is `rewrite_value(read, result)`. Each store writes
# it as `result` in `requests` where the row still holds `read`, and drops it otherwise, in
# the batch's own write (an answer pruned meanwhile is not put back; docs/storage.md, Data
# left on disk), by one rule: `apply_rewrites`.
CF_REQUEST_REWRITE = "requests_rewrite"

MAX_TENANT_BYTES = 0xFFFF


# Every key a capture writes (about ten) starts with its tenant's prefix; tenants are few.
@functools.lru_cache(maxsize=4096)
def tenant_prefix(tenant: str) -> bytes:
    raw = tenant.encode("utf-8")
    if len(raw) > MAX_TENANT_BYTES:
        raise ValueError(f"tenant name longer than {MAX_TENANT_BYTES} bytes")
    return struct.pack(">H", len(raw)) + raw


def tenant_key(tenant: str, *parts: str | bytes) -> bytes:
    """`tenant|part1|part2...`; str parts are UTF-8 and separated by 0x00 (ids never contain it)."""
    encoded = [p.encode("utf-8") if isinstance(p, str) else p for p in parts]
    return tenant_prefix(tenant) + b"\x00".join(encoded)


def split_tenant(key: bytes) -> tuple[str, bytes]:
    """Inverse of `tenant_prefix`: (tenant, rest of the key)."""
    (length,) = struct.unpack(">H", key[:2])
    return key[2 : 2 + length].decode("utf-8"), key[2 + length :]


def u64(value: int) -> bytes:
    return struct.pack(">Q", value)


def from_u64(raw: bytes) -> int:
    return int(struct.unpack(">Q", raw)[:1][0])


def rewrite_value(read: bytes, result: bytes) -> bytes:
    """A `CF_REQUEST_REWRITE` op's value: the answer as read, then what it becomes."""
    return struct.pack(">I", len(read)) + read + result


def split_rewrite(value: bytes) -> tuple[bytes, bytes]:
    """Inverse of `rewrite_value`: (the answer as read, what it becomes)."""
    (length,) = struct.unpack(">I", value[:4])
    return value[4 : 4 + length], value[4 + length :]


def apply_rewrites(ops: Sequence[Op], stored: Mapping[bytes, bytes | None]) -> list[Op]:
    """`ops` with each `CF_REQUEST_REWRITE` op made a put of its result in `requests` where the
    row holds the answer as read, and dropped otherwise. A batch applies in order
    (docs/storage.md, Batches apply in order): a rewrite compares with the row as the batch's
    earlier ops left it, else as `stored` holds it, the row before the batch (None: none),
    which has every key a rewrite names. Both stores write a batch with rewrites as this
    returns it."""
    now = dict(stored)
    out: list[Op] = []
    for cf, key, value in ops:
        if cf == CF_REQUEST_REWRITE:
            assert value is not None
            read, result = split_rewrite(value)
            if now[key] != read:
                continue
            cf, value = CF_REQUESTS, result
        if cf == CF_REQUESTS:
            now[key] = value
        out.append((cf, key, value))
    return out


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with `prefix` (None: no upper bound)."""
    as_list = bytearray(prefix)
    while as_list and as_list[-1] == 0xFF:
        as_list.pop()
    if not as_list:
        return None
    as_list[-1] += 1
    return bytes(as_list)
