"""The intents a pattern's view shows (Suggest, GetPattern): the `SHOWN_INTENTS` of most hits
(the oldest first among equals), with how many the pattern has (docs/capture.md, "The intents
a view shows").

A pattern keeps every distinct intent, so a view never reads them all: its counters, which
every capture of the pattern rewrites anyway, hold the intent count and the [id, hit count] of
the shown ones, best first, and a view reads those few intent rows. Kept exactly: a capture
adds one intent (hit count 1) or raises one intent's count by one, and intents leave only with
their pattern, so the only intent whose place can change is that one (`counted`). A counters
row an older build wrote has neither (None): the first open's pass over such rows
(service/_older_builds.py) or the pattern's next capture, whichever comes first, and meanwhile
each view of it, derives them from all its intents (`summary`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import replace

from pml_server.domain.records import IntentRecord, PatternCounters

SHOWN_INTENTS = 32


def _order(pair: list[int]) -> tuple[int, int]:
    return -pair[1], pair[0]


def summary(intents: Iterable[IntentRecord]) -> tuple[int, list[list[int]]]:
    """(how many, [id, hit count] of the shown ones, best first) of all a pattern's intents,
    taken one at a time: what it holds is the shown ones, however many `intents` yields."""
    count = 0

    def pairs() -> Iterator[list[int]]:
        nonlocal count
        for intent in intents:
            count += 1
            yield [intent.id, intent.hit_count]

    top = heapq.nsmallest(SHOWN_INTENTS, pairs(), key=_order)
    return count, top


def summarized(counters: PatternCounters, intents: Iterable[IntentRecord]) -> PatternCounters:
    """`counters` with the summary of `intents` (all the pattern's, as stored)."""
    count, top = summary(intents)
    return replace(counters, intent_count=count, top_intents=top)


def counted(
    counters: PatternCounters, intent_id: int, hit_count: int, added: bool
) -> PatternCounters:
    """`counters` (holding the summary) once the intent `intent_id` has `hit_count` hits:
    `added` (a new intent, hit count 1) or bumped by one. Only its own place can change."""
    count, top = counters.intent_count, counters.top_intents
    if count is None or top is None:
        raise ValueError("counters without the shown intents' summary")
    top = [pair for pair in top if pair[0] != intent_id]
    top.append([intent_id, hit_count])
    top.sort(key=_order)
    return replace(
        counters,
        intent_count=count + (1 if added else 0),
        top_intents=top[:SHOWN_INTENTS],
    )


def shown_ids(counters: PatternCounters) -> list[int] | None:
    """The ids of the intents a view of the pattern shows, best first; None when `counters`
    predate the summary (then read them all)."""
    if counters.top_intents is None or counters.intent_count is None:
        return None
    return [pair[0] for pair in counters.top_intents]
