"""The RocksDB store: column families, tenant keys, atomic batches, overlay reads, durability
modes, schema version, reopening. Real RocksDB in tmp_path."""

from __future__ import annotations

import gc
import hashlib
import struct
import threading
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml_server.domain.errors import FailedPreconditionError
from pml_server.domain.model import RetentionRow
from pml_server.domain.records import CapabilityRecord, ParamSpec, PatternCounters, PatternRecord
from pml_server.storage import SCHEMA_VERSION, SchemaVersionError, Store
from pml_server.storage.codec import encode_capability, encode_pattern
from pml_server.storage.keys import (
    CF_META,
    CF_PATTERNS,
    prefix_end,
    split_tenant,
    tenant_key,
    tenant_prefix,
)
from pml_server.storage.repo import Repository, tools_digest
from pml_server.storage.repo._patterns import RETENTION_PAGE
from pml_server.storage.rocks import StoreClosedError
from testing.store_rows import all_patterns
from tests.support import open_engine


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20), st.text(max_size=10))
def test_tenant_prefixes_never_collide(a: str, b: str, rest: str) -> None:
    key = tenant_key(a, rest)
    if a != b:
        assert not key.startswith(tenant_prefix(b))
    assert split_tenant(key)[0] == a


@given(st.binary(min_size=1, max_size=8), st.binary(max_size=8))
def test_prefix_end_bounds_every_key_with_the_prefix(prefix: bytes, tail: bytes) -> None:
    end = prefix_end(prefix)
    assert end is None or prefix + tail < end


@pytest.mark.parametrize("durability", ["sync", "fast"])
def test_batch_is_visible_and_survives_reopen(tmp_path: Path, durability: str) -> None:
    store = Store(tmp_path, durability)
    store.write([(CF_PATTERNS, b"a", b"1"), (CF_META, b"x", b"2"), (CF_PATTERNS, b"b", b"3")])
    store.write([(CF_PATTERNS, b"b", None)])
    assert store.get(CF_PATTERNS, b"a") == b"1"
    assert store.get(CF_PATTERNS, b"b") is None
    store.close()
    reopened = Store(tmp_path, durability)
    assert reopened.get(CF_PATTERNS, b"a") == b"1"
    assert reopened.get(CF_META, b"x") == b"2"
    assert reopened.get(CF_PATTERNS, b"b") is None
    assert reopened.get(CF_META, b"a") is None  # column families are separate key spaces
    reopened.close()


def test_scan_respects_prefix_start_limit_and_direction(tmp_path: Path) -> None:
    store = Store(tmp_path, "fast")
    t1, t2 = tenant_prefix("t"), tenant_prefix("tt")
    store.write([(CF_PATTERNS, t1 + bytes([i]), bytes([i])) for i in range(10)])
    store.write([(CF_PATTERNS, t2 + b"x", b"other tenant")])
    rows = store.scan(CF_PATTERNS, t1)
    assert [v for _, v in rows] == [bytes([i]) for i in range(10)]
    assert [v for _, v in store.scan(CF_PATTERNS, t1, start=t1 + bytes([4]), limit=3)] == [
        b"\x04",
        b"\x05",
        b"\x06",
    ]
    newest = store.scan(CF_PATTERNS, t1, reverse=True, limit=2)
    assert [v for _, v in newest] == [b"\x09", b"\x08"]
    before = store.scan(CF_PATTERNS, t1, start=t1 + bytes([3]), reverse=True)
    assert [v for _, v in before] == [b"\x02", b"\x01", b"\x00"]
    store.close()


def test_scan_stored_streams_the_committed_rows_in_key_order(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")
    t1, t2 = tenant_prefix("t"), tenant_prefix("tt")
    store.write([(CF_PATTERNS, t2 + b"x", b"2x"), (CF_PATTERNS, t1 + b"b", b"1b")])
    store.write([(CF_PATTERNS, t1 + b"a", b"1a"), (CF_META, b"m", b"other family")])
    assert list(store.scan_stored(CF_PATTERNS)) == store.scan(CF_PATTERNS, b"")
    assert [v for _, v in store.scan_stored(CF_PATTERNS, t1)] == [b"1a", b"1b"]
    store.submit([(CF_PATTERNS, t1 + b"c", b"1c")]).wait()
    assert [v for _, v in store.scan_stored(CF_PATTERNS, t1)] == [b"1a", b"1b", b"1c"]
    store.close()


def test_group_commit_merges_concurrent_writers_without_loss(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")

    def writer(n: int) -> None:
        for i in range(200):
            store.write([(CF_PATTERNS, f"{n}-{i:04}".encode(), b"v")])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.scan(CF_PATTERNS, b"")) == 800
    store.close()
    reopened = Store(tmp_path, "sync")
    assert len(reopened.scan(CF_PATTERNS, b"")) == 800
    reopened.close()


def test_a_key_written_many_times_in_one_group_keeps_its_last_write(tmp_path: Path) -> None:
    """Submits queued together are written as one batch with each key once: the last
    write of a key wins, a delete after a put removes it, a put after a delete restores it,
    in the store, across a reopen, and every ticket still completes."""
    store = Store(tmp_path, "sync")
    tickets = []
    for i in range(300):  # far more than one fsync takes: many land in one group
        tickets.append(
            store.submit(
                [
                    (CF_PATTERNS, b"stats", f"v{i}".encode()),
                    (CF_PATTERNS, b"gone", None if i % 2 else b"x"),
                    (CF_PATTERNS, b"back", b"y" if i % 2 else None),
                    (CF_PATTERNS, f"row-{i:03}".encode(), b"r"),
                ]
            )
        )
    for ticket in tickets:
        ticket.wait()
    expected = {
        b"stats": b"v299",
        b"back": b"y",
        **{f"row-{i:03}".encode(): b"r" for i in range(300)},
    }
    assert dict(store.scan(CF_PATTERNS, b"")) == expected
    store.close()
    reopened = Store(tmp_path, "sync")
    assert dict(reopened.scan(CF_PATTERNS, b"")) == expected
    reopened.close()


def test_queued_writes_are_readable_before_commit(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")
    ticket = store.submit([(CF_PATTERNS, b"k", b"v1")])
    # read-your-writes for the next lock holder, whether or not the fsync has finished
    assert store.get(CF_PATTERNS, b"k") == b"v1"
    assert store.scan(CF_PATTERNS, b"k") == [(b"k", b"v1")]
    ticket.wait()
    assert store.get(CF_PATTERNS, b"k") == b"v1"
    store.close()


def test_writes_after_close_are_refused(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")
    store.close()
    with pytest.raises(StoreClosedError):
        store.submit([(CF_PATTERNS, b"k", b"v")])


def test_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        Store(tmp_path, "yolo")


def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    store = Store(tmp_path, "fast")
    assert store.schema_version == SCHEMA_VERSION
    store.write([(CF_META, b"meta/schema_version", struct.pack(">I", SCHEMA_VERSION + 1))])
    store.close()
    with pytest.raises(SchemaVersionError, match="upgrade pml"):
        Store(tmp_path, "fast")


def test_an_older_schema_is_raised_before_the_first_write_so_older_builds_refuse_the_store(
    tmp_path: Path,
) -> None:
    """A store an older build wrote (schema 1) is marked with this build's version before
    anything this build writes: an older build then refuses it at open ("upgrade pml")
    instead of failing on the rows it cannot read (docs/storage.md, Migrations)."""
    older = struct.pack(">I", 1)
    store = Store(tmp_path, "fast")
    store.write([(CF_META, b"meta/schema_version", older)])
    store.close()
    for write in (
        lambda s: s.write([(CF_PATTERNS, b"k", b"v")]),
        lambda s: s.submit([(CF_PATTERNS, b"k", b"v")]).wait(),
        lambda s: s.delete_unchanged(CF_PATTERNS, [(b"k", b"v")]),
    ):
        store = Store(tmp_path, "fast")
        assert store.schema_version == SCHEMA_VERSION > 1
        assert store.get(CF_META, b"meta/schema_version") == older  # opened, nothing written
        write(store)
        assert store.get(CF_META, b"meta/schema_version") == struct.pack(">I", SCHEMA_VERSION)
        store.write([(CF_META, b"meta/schema_version", older)])
        store.close()


def test_a_build_that_refuses_an_older_builds_store_leaves_its_schema_version(
    tmp_path: Path,
) -> None:
    """Serving an older build's store with another embedding model is refused at start
    (FailedPreconditionError, exit 2): the store stays at its version, so the older build
    still opens it; the raise came at open, and a mistaken flag locked the user out of the
    build that wrote the store (docs/storage.md, Migrations)."""
    older = struct.pack(">I", 1)
    store = Store(tmp_path, "fast")
    store.write([(CF_META, b"meta/schema_version", older), (CF_META, b"model_id", b"older")])
    store.close()
    with pytest.raises(FailedPreconditionError, match="embedding model 'older'"):
        open_engine(tmp_path)
    store = Store(tmp_path, "fast")
    assert store.get(CF_META, b"meta/schema_version") == older
    store.close()


@pytest.mark.parametrize(
    "params",
    [(), (ParamSpec("PATH", "string", False), ParamSpec("TOKEN", "string", True))],
)
def test_pattern_and_capability_encodings_match_their_to_json(
    params: tuple[ParamSpec, ...],
) -> None:
    pattern = PatternRecord(
        id="pat_1",
        code_hash="sha256:ab",
        template='read({path: $PATH}) "é"',
        original_code="read({path: 'a'})",
        language="javascript",
        tools_used=("read_file", "parse_json"),
        params=params,
        parameter_schema_json='{"type":"object"}',
        capability_id="cap_1",
        first_seen_ms=17,
        code_tools=("read_file",),
        parse_ok=False,
        flagged_for_removal=True,
        superseded_by="pat_0",
    )
    assert encode_pattern(pattern) == pattern.to_json()
    assert PatternRecord.from_json(encode_pattern(pattern)) == pattern
    capability = CapabilityRecord("cap_1", ("read_file",), ("pat_1", "pat_2"), 5)
    assert encode_capability(capability) == capability.to_json()


@given(st.lists(st.text(max_size=8), max_size=5))
def test_tools_digest_is_the_sha256_of_the_signature_whatever_the_sequence_type(
    tools: list[str],
) -> None:
    """Memoized on the signature: a list and a tuple of the same tools share one digest, the
    same bytes the stored grouping keys were written with."""
    expected = hashlib.sha256("\x1f".join(tools).encode()).hexdigest()[:32]
    assert tools_digest(tools) == tools_digest(tuple(tools)) == expected


def test_pattern_tools_reads_each_tenants_patterns_tools(tmp_path: Path) -> None:
    store = Store(tmp_path, "fast")
    repo = Repository(store)

    def pattern(pattern_id: str, tools: tuple[str, ...]) -> PatternRecord:
        return PatternRecord(
            id=pattern_id,
            code_hash=f"sha256:{pattern_id}",
            template="t",
            original_code="c",
            language="javascript",
            tools_used=tools,
            params=(),
            parameter_schema_json="{}",
            capability_id="cap_1",
            first_seen_ms=1,
        )

    store.write(
        [
            repo.patterns.put_pattern("t1", pattern("pat_a", ("read_file", "parse_json"))),
            repo.patterns.put_pattern("t1", pattern("pat_b", ())),
            repo.patterns.put_pattern("t2", pattern("pat_a", ("gmail_send",))),
        ]
    )
    assert repo.patterns.pattern_tools("t1") == {
        p.id: p.tools_used for p in all_patterns(repo, "t1")
    }
    assert repo.patterns.pattern_tools("t1") == {"pat_a": ("read_file", "parse_json"), "pat_b": ()}
    assert repo.patterns.pattern_tools("t2") == {"pat_a": ("gmail_send",)}
    assert repo.patterns.pattern_tools("t3") == {}
    store.close()


def test_long_tool_signatures_are_digested_without_being_kept() -> None:
    """Tool names are the clients' (256 characters, 256 calls a record): the digests memoized
    for repeated signatures keep no large one alive (4,096 of the largest kept over 300 MB),
    and a signature's digest is the same whether memoized or not."""
    first = [f"0_{i}_" + "t" * 240 for i in range(64)]
    expected = hashlib.sha256("\x1f".join(first).encode()).hexdigest()[:32]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(300):  # about 20 KB of names each, dropped by the caller after use
            tools_digest([f"{n}_{i}_" + "t" * 240 for i in range(64)])
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 200_000, f"{held} bytes kept by 300 long signatures"
    assert tools_digest(first) == expected
    assert tools_digest(("read_file", "parse_csv")) == tools_digest(["read_file", "parse_csv"])


@pytest.mark.parametrize("count", [2 * RETENTION_PAGE, 2 * RETENTION_PAGE + 1])
def test_retention_rows_reads_every_pattern_with_counters_a_page_at_a_time(
    tmp_path: Path, count: int
) -> None:
    """Every pattern of the tenant, in id order across pages (a last page full or not), with
    the counters the policy reads; none of another tenant, none whose counters are gone. It
    reads writes still pending (the last pattern's), which `scan_stored` refuses."""
    store = Store(tmp_path, "sync")  # a writer thread: a held submit stays pending
    repo = Repository(store)

    def pattern(n: int) -> PatternRecord:
        return PatternRecord(
            id=f"pat_{n:04d}",
            code_hash=f"sha256:{n}",
            template="t",
            original_code="c",
            language="javascript",
            tools_used=(),
            params=(),
            parameter_schema_json="{}",
            capability_id=f"cap_{n % 3}",
            first_seen_ms=1,
        )

    ops = [repo.patterns.put_pattern("t2", pattern(0))]
    ops.append(repo.patterns.put_counters("t2", "pat_0000", PatternCounters(1, 1, 0, 5)))
    for n in range(count):
        ops.append(repo.patterns.put_pattern("t1", pattern(n)))
        if n != 7:  # pat_0007 lost its counters (deleted meanwhile)
            ops.append(
                repo.patterns.put_counters("t1", f"pat_{n:04d}", PatternCounters(n, n, 1, n))
            )
    store.write(ops[:-2])
    with store.writes_held():  # the last pattern's writes stay pending in the block
        store.submit(ops[-2:])
        with pytest.raises(RuntimeError, match="pending"):
            list(store.scan_stored(CF_PATTERNS, tenant_prefix("t1")))
        rows = list(repo.patterns.retention_rows("t1"))
    expected = [RetentionRow(f"pat_{n:04d}", f"cap_{n % 3}", n, 1, n) for n in range(count)]
    assert rows == [row for row in expected if row.id != "pat_0007"]
    assert list(repo.patterns.retention_rows("t2")) == [RetentionRow("pat_0000", "cap_0", 1, 0, 5)]
    assert list(repo.patterns.retention_rows("t3")) == []
    store.close()


def test_the_repository_has_no_read_of_every_pattern_record_at_once() -> None:
    """A tenant's pattern records are read a page at a time or streamed (docs/storage.md, The
    key-value layout): the read that built every one in memory at once lives in
    `testing/store_rows.py`, for tests and benches, so nothing in the server can call it."""
    from pml_server.storage.repo._patterns import PatternRows

    assert not hasattr(PatternRows, "all_patterns")
    sources = Path(__file__).resolve().parents[2] / "pml_server"
    assert not [p for p in sources.rglob("*.py") if "all_patterns" in p.read_text()]
