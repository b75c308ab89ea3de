"""The cross-lingual companion of the default embedder (docs/ranking.md, Other languages).

MiniLM, the default model, reads English only. Beside it, a multilingual model (`cross_lingual`
setting: USE multilingual by default) embeds the intents too, into a second, in-memory vector
index per tenant (`search.companion.CompanionIndex`); a Suggest whose request is not English
(`embedding.language.is_english`: script, then function words) is answered in that space: the
same core call (retrieval, formula, filters and grouping), with the companion's cosines
as the semantic part and the lexical part weighed `OTHER_LANGUAGE_LEXICAL_WEIGHT` at most (a
French request's words rarely match English documents, and when they do it is mostly by
accident; its accents are folded first, `lexical_text`).

The reverse: an intent recorded in another language (the same guess, at capture) makes the
tenant use the companion; an English request over such a tenant is answered on the Python path
with each intent compared in the space that reads it (`search.companion.MixedView`: English
intents by the primary model, exactly as before, the others by the companion) and its lexical
part weighed `MIXED_LEXICAL_WEIGHT` at most. English requests in a tenant whose intents are
all English, a client-supplied `intent_embedding` (a vector of the primary
model) and the primary index are untouched.

The companion costs only tenants that use it. Its vectors are never stored: a tenant's are
computed from the intent texts its index already holds once its first request (or intent) in
another language arrives, and from then on after its captures, by one background thread
(`CompanionFiller`), in batches, off the capture's path. A Suggest in another language first
embeds what is still missing if that is at most `SYNC_FILL` texts (a capture just made is found
at once); with more missing (a tenant's first such request over a large memory, or a burst of
captures) it is answered by the primary model, as without a companion, while the thread
catches up.
"""

from __future__ import annotations

import logging
import queue
import threading
import unicodedata
from dataclasses import replace

from pml_server.config import EngineConfig
from pml_server.domain.model import SuggestQuery
from pml_server.embedding import CachedEmbedder, make_companion_embedder
from pml_server.embedding.language import is_english
from pml_server.ranking import RankingConfig, RequestParts
from pml_server.ranking.other_languages import split_other_language
from pml_server.ranking.plans import split_request_spans
from pml_server.search import TenantSearchIndex

log = logging.getLogger(__name__)

# The lexical weight of a request that is not English, at most (the tenant's own weight if
# lower): chosen on the multilingual probe's tune part (benches/results/multilingual.md).
OTHER_LANGUAGE_LEXICAL_WEIGHT = 0.3
# The request parts' coverage weight of a request that is not English, at least (unless the
# tenant turned the coverage off): its words rarely meet the intents', so the coverage carries
# what BM25 tells an English request about a capability with several steps; chosen on the
# probe's tune part (docs/ranking.md, Other languages, "Request parts in other languages").
OTHER_LANGUAGE_COVERAGE_WEIGHT = 0.8
# The lexical weight of an English request over a tenant holding intents in other languages,
# at most: their documents cannot share its words, so a full weight ranks every English
# pattern it shares words with above them (chosen on the probe's reverse tune part among 0.9,
# 0.7, 0.6, 0.5, 0.4, 0.3, the lowest keeping English hit@1 within 0.01 and MRR unchanged:
# benches/results/multilingual.md).
MIXED_LEXICAL_WEIGHT = 0.5
# Texts per companion embedding call while filling an index.
FILL_BATCH = 32
# Missing companion vectors a Suggest embeds itself before answering (about 10 ms each).
SYNC_FILL = 32


def make_companion(config: EngineConfig) -> CachedEmbedder | None:
    """The companion model the configuration asks for (none with the hashing embedder)."""
    if config.cross_lingual == "none" or config.embedder == "hashing":
        return None
    return make_companion_embedder(
        config.cross_lingual,
        config.embedder,
        config.embedding_cache_size,
        config.embedding_cache_bytes,
    )


def applies(companion: CachedEmbedder | None, query: SuggestQuery) -> bool:
    """Whether `query` should be answered in the companion's space."""
    return companion is not None and query.intent_embedding is None and not is_english(query.intent)


def mixes(
    companion: CachedEmbedder | None, index: TenantSearchIndex | None, query: SuggestQuery
) -> bool:
    """Whether `query`, an English request, meets intents recorded in another language, which
    it then reads in the companion's space (the reverse direction)."""
    return (
        companion is not None
        and index is not None
        and query.intent_embedding is None
        and index.companion is not None
        and index.companion.has_foreign()
        and is_english(query.intent)
    )


def fill(
    companion: CachedEmbedder, index: TenantSearchIndex, stop: threading.Event | None = None
) -> int:
    """Embed the intents of `index` that have no companion vector yet, a batch at a time;
    returns how many."""
    if index.companion is None:
        return 0
    pending = index.companion.pending()
    for first in range(0, len(pending), FILL_BATCH):
        if stop is not None and stop.is_set():
            break
        chunk = pending[first : first + FILL_BATCH]
        vectors = companion.embed([text for _, text in chunk])
        index.companion.add([intent_id for intent_id, _ in chunk], vectors)
    return len(pending)


def lexical_text(text: str) -> str:
    """The words a request in another language is searched with in the lexical index: its
    accents folded (NFKD, combining marks dropped), so a word spelled as its English cognate
    but for an accent ("pódcasts", "vidéo", "música") meets the English documents' stem. English
    documents rarely carry accents; Chinese, Japanese and Korean characters carry none. Composed
    again (NFC) once the marks are dropped: NFKD splits each Hangul syllable into its letters
    (jamo), which are no marks, and a Korean request's character pairs met no Korean intent's."""
    folded = unicodedata.normalize("NFKD", text)
    unmarked = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", unmarked)


def request_parts(companion: CachedEmbedder, intent: str) -> RequestParts | None:
    """The parts of a request ranked in the companion's space, embedded by the companion in one
    call (docs/ranking.md, Other languages, "Request parts in other languages"): a request in
    another language cut by `ranking.other_languages` (its sentences and connectives), an
    English request over intents in another language by the English splitter; each part weighs
    1. None for a request of one part."""
    parts = split_request_spans(intent)[0] if is_english(intent) else split_other_language(intent)
    if len(parts) < 2:
        return None
    return RequestParts(tuple(companion.embed(list(parts))), tuple(1.0 for _ in parts))


def other_language_ranking(ranking: RankingConfig) -> RankingConfig:
    """The ranking settings of a request answered in the companion's space."""
    weight = min(ranking.lexical_weight, OTHER_LANGUAGE_LEXICAL_WEIGHT)
    coverage = ranking.step_coverage_weight
    if coverage > 0:
        coverage = max(coverage, OTHER_LANGUAGE_COVERAGE_WEIGHT)
    return replace(ranking, lexical_weight=weight, step_coverage_weight=coverage)


def mixed_ranking(ranking: RankingConfig) -> RankingConfig:
    """The ranking settings of an English request over intents in other languages."""
    return replace(ranking, lexical_weight=min(ranking.lexical_weight, MIXED_LEXICAL_WEIGHT))


class CompanionFiller:
    """One background thread that fills the companion indexes of the tenants that use it."""

    def __init__(self, companion: CachedEmbedder) -> None:
        self.companion = companion
        self._queue: queue.SimpleQueue[TenantSearchIndex | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._queued = 0

    def request(self, index: TenantSearchIndex) -> None:
        """Fill `index`'s missing companion vectors soon (on the thread)."""
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pml-companion", daemon=True)
                self._thread.start()
        with self._idle:
            self._queued += 1
        self._queue.put(index)

    def ready_for(self, index: TenantSearchIndex) -> bool:
        """Whether a Suggest can be answered in the companion's space now: the tenant uses the
        companion (from this call on) and at most `SYNC_FILL` vectors are missing, which this
        call embeds."""
        if index.companion is None:
            return True  # nothing to fill: as an index whose companion is complete
        index.companion.activate()
        missing = index.companion.missing()
        if missing > SYNC_FILL:
            self.request(index)
            return False
        if missing:
            fill(self.companion, index)
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until every requested fill is done (tests and benchmarks)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._queued == 0, timeout)

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=30)

    def _run(self) -> None:
        while (index := self._queue.get()) is not None:
            try:
                if not self._stop.is_set():
                    fill(self.companion, index, self._stop)
            except Exception:  # the next request retries; English answers are unaffected
                log.exception("filling the cross-lingual index failed")
            finally:
                with self._idle:
                    self._queued -= 1
                    self._idle.notify_all()
