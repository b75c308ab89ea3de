"""A session's id and the digest that names its stored row (docs/ranking.md, Sessions): the id
itself is never stored, only its digest."""

from __future__ import annotations

import hashlib

DIGEST_CHARS = 32
# A session named by its digest alone: what a held OTLP span keeps of a conversation id it may
# not hold as it is (docs/capture.md, What a held span keeps). It names the row the id names.
BY_DIGEST = "pml-session-sha256:"
_HEX = frozenset("0123456789abcdef")


def session_digest(session_id: str) -> str:
    """The hex digits naming the session's row: SHA-256 of its id, or the digest a stand-in
    (`digest_stand_in`) carries."""
    digest = session_id.removeprefix(BY_DIGEST)
    if digest is not session_id and len(digest) == DIGEST_CHARS and _HEX.issuperset(digest):
        return digest
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def digest_stand_in(session_id: str) -> str:
    """A session id naming the same session as `session_id` without holding it."""
    return BY_DIGEST + session_digest(session_id)
