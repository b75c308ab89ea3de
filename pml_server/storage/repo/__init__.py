"""Typed access to the store: domain records in, keys and bytes out.

The engine talks to this package only, never to keys or rocksdict, so a second backend (a
shared SQL database, `storage.postgres`) implements this surface without touching the capture
rules. Reads return records; writes are built as operations (`Op`) that the engine collects
into one atomic batch.

`Repository` is one part per kind of row, each a private module of this package, and a caller
takes the part it needs (docs/architecture.md, Storage):

- `meta` (`_meta`): the embedding model, id allocator marks, tenant stats, index snapshots
- `requests` (`_requests`): idempotency answers
- `patterns` (`_patterns`): pattern records, their code-hash links, counters and ceilings
- `intents` (`_intents`): a pattern's intents, and every tenant's for a rebuild
- `capabilities` (`_capabilities`): capability records and their tool-signature links
- `sessions` (`_sessions`): sessions' last steps and the transitions between capabilities
- `logs` (`_logs`): the failure log, the op log and the audit log
- `views` (`_views`): what Suggest shows and ranks by, read in few round trips
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

from pml_server.storage.repo._capabilities import CapabilityRows, tools_digest
from pml_server.storage.repo._intents import IntentRows
from pml_server.storage.repo._logs import LogRows, names_pattern
from pml_server.storage.repo._meta import MetaRows
from pml_server.storage.repo._patterns import PatternRows
from pml_server.storage.repo._requests import RequestRows
from pml_server.storage.repo._sessions import SessionRows
from pml_server.storage.repo._views import (
    ShownView,
    ViewReads,
    ViewRows,
    counter_rank_row,
    pattern_rank_row,
)
from pml_server.storage.seam import StoreBackend

__all__ = [
    "CapabilityRows",
    "IntentRows",
    "LogRows",
    "MetaRows",
    "PatternRows",
    "Repository",
    "RequestRows",
    "SessionRows",
    "ShownView",
    "ViewReads",
    "ViewRows",
    "counter_rank_row",
    "names_pattern",
    "pattern_rank_row",
    "tools_digest",
]


class Repository:
    """The store's rows, one part per kind (see the package docstring)."""

    def __init__(self, store: StoreBackend) -> None:
        self.store = store
        self.meta = MetaRows(store)
        self.requests = RequestRows(store)
        self.patterns = PatternRows(store)
        self.intents = IntentRows(store)
        self.capabilities = CapabilityRows(store)
        self.sessions = SessionRows(store)
        self.logs = LogRows(store)
        self.views = ViewReads(store)

    def consistent_reads(self) -> AbstractContextManager[None]:
        """A block whose reads see one state of the store (the embedded store: every read
        already does, for what Suggest reads, since its ceilings rise before a write shows)."""
        return contextlib.nullcontext()
