"""The step factor of a request read in the companion's space, with its tool profiles summed from
the companion's vectors (docs/ranking.md, Other languages, "Steps in the companion's space").

The step factor (docs/ranking.md, Steps) reads the request's nearest intents, their patterns'
tools and, for its tool-profile part, the request's cosine with each tool's profile: the unit
mean of the vectors of the intents calling it. Those profiles live in the primary model's space,
so a request embedded by the companion had its profile part left out, and lost what the profiles
bring English requests. `CompanionSteps` keeps a ranking table of its own (the core's, unchanged)
that holds only what the step factor reads: each pattern's tools and those of its intents that
have a companion vector; the core sums the profiles from the companion's index as it does from
the primary's. Its rows are never ranked (no counters), only asked for step factors.
"""

from __future__ import annotations

from collections.abc import Sequence

from pml_server.ranking.table import RankTable


class CompanionSteps:
    """The patterns' tools and the linked intents the companion's step factors read. Every
    method is called with the tenant index's write lock held (as `CompanionIndex`'s are)."""

    def __init__(self) -> None:
        self.table = RankTable()
        # pattern id -> its tools, for every pattern an intent was indexed for (a tenant's
        # first request in another language may come after many captures in English)
        self._tools: dict[str, tuple[str, ...]] = {}
        # what the table holds of each pattern (patterns with a companion vector)
        self._in_table: dict[str, tuple[str, ...]] = {}

    def note_tools(self, pattern_id: str, tools: Sequence[str]) -> None:
        """The tools of a pattern an intent was just indexed for."""
        known = tuple(tools)
        self._tools[pattern_id] = known
        if pattern_id in self._in_table and self._in_table[pattern_id] != known:
            self._set(pattern_id, known)

    def link(self, linked: Sequence[tuple[int, str]]) -> None:
        """(intent id, pattern id) of intents whose companion vector was just added."""
        for intent_id, pattern_id in linked:
            tools = self._tools.get(pattern_id, ())
            if self._in_table.get(pattern_id) != tools:
                self._set(pattern_id, tools)
            self.table.link_intent(intent_id, pattern_id)

    def unlink(self, intent_ids: Sequence[int]) -> None:
        """Intents gone from the companion's index."""
        patterns = {p for i in intent_ids if (p := self.table.pattern_of(i)) is not None}
        self.table.unlink_intents(intent_ids)
        for pattern_id in patterns:
            if not self.table.intents_of(pattern_id):
                self.table.remove_pattern(pattern_id)
                self._in_table.pop(pattern_id, None)

    def _set(self, pattern_id: str, tools: tuple[str, ...]) -> None:
        self.table.set_pattern(pattern_id, pattern_id, tools, False, False)
        self._in_table[pattern_id] = tools
