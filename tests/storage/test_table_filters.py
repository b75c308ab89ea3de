"""Every column family's tables carry a whole-key Bloom filter: a point read of a key a table
does not hold (a new request id, a new code hash, a key in another level) skips the table
without reading a data block. Real RocksDB in tmp_path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pml_server.storage import Store
from pml_server.storage.keys import COLUMN_FAMILIES


def _table_properties(store: Store, cf: str) -> dict[str, int]:
    text = store._cf[cf].property_value("rocksdb.aggregated-table-properties")
    found = dict(re.findall(r"(# entries for filter|filter block size|# entries)=(\d+)", text))
    return {name: int(value) for name, value in found.items()}


@pytest.mark.parametrize("cf", COLUMN_FAMILIES)
def test_flushed_tables_have_a_filter_of_every_key(tmp_path: Path, cf: str) -> None:
    store = Store(tmp_path, "fast")
    store.write([(cf, f"key-{i:05}".encode(), b"value" * 10) for i in range(2000)])
    store._cf[cf].flush()
    props = _table_properties(store, cf)
    assert props["# entries"] >= 2000
    assert props["# entries for filter"] == props["# entries"]
    assert props["filter block size"] > 2000  # about 10 bits a key
    # misses and hits answer as before
    assert store.get_many(cf, [b"key-00007", b"key-99999"]) == [b"value" * 10, None]
    store.close()
