"""`REDACTION_RULES` (capture/redact.py) is the version of the core's rules for free text: a
store is redacted again once under each at open (service/_free_text.py; docs/capture.md,
Secrets). A change to the rules' source must say whether it redacts more: this test records
the source each version was read from, and fails until the change records its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pml_server.capture.redact import REDACTION_RULES

ROOT = Path(__file__).resolve().parents[2]
# The core's rules for free text: `redact_text` and what it calls, and the values a capture
# adds to them (`prepare.rs`, `redact_with`).
SOURCES = ("pml_core_rs/src/normalize/secrets.rs", "pml_core_rs/src/normalize/prepare.rs")
# The rules' source each `REDACTION_RULES` was recorded with (sha256 of `SOURCES`, in order).
RECORDED = {1: "93583128edf18e8d08f38d805187e52351ff1a9fbaec058d39221a4a728fd780"}


def _digest() -> str:
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update((ROOT / source).read_bytes())
    return digest.hexdigest()


def test_the_redaction_rules_version_is_recorded_with_todays_rules() -> None:
    assert RECORDED.get(REDACTION_RULES) == _digest(), (
        f"the core's rules for free text ({', '.join(SOURCES)}) changed: if the change"
        " redacts more (a new rule, a rule that finds more), bump REDACTION_RULES in"
        " pml_server/capture/redact.py, so that every"
        " store written before is redacted again at its next open (docs/capture.md, Secrets);"
        f" either way, record {_digest()} under REDACTION_RULES in RECORDED here"
    )
