"""A session's digest and its stand-in (`pml_server.domain.sessions`; docs/ranking.md,
Sessions): the stand-in names the row its id names, and only a well-formed one is read as a
digest."""

from __future__ import annotations

import hashlib

from pml_server.domain.sessions import BY_DIGEST, DIGEST_CHARS, digest_stand_in, session_digest


def test_a_stand_in_names_the_session_its_id_names() -> None:
    for session_id in ("conv-1", "conv_689667905b048191b4740501625afd940c7533ace33a2dab", "会話"):
        stand_in = digest_stand_in(session_id)
        assert session_id not in stand_in
        assert session_digest(stand_in) == session_digest(session_id)
        assert digest_stand_in(stand_in) == stand_in


def test_an_id_that_only_looks_like_a_stand_in_is_hashed_as_any_other() -> None:
    for session_id in (BY_DIGEST, BY_DIGEST + "f" * 31, BY_DIGEST + "F" * 32, BY_DIGEST + "g" * 32):
        expected = hashlib.sha256(session_id.encode()).hexdigest()[:DIGEST_CHARS]
        assert session_digest(session_id) == expected
