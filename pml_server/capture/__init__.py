"""Capture rules of eager learning as pure domain code (no storage, no gRPC).

`records` holds the stored record types, `rules` the per-execution decisions (rules 1-7 of
docs/capture.md, Capture rules), `dedup` the similarity decisions (intent near-duplicates,
capability grouping) and `normalize` the adapter over the Rust normalizer.
"""
