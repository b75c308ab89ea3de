"""The Python ranking: Suggest's formula, filters, grouping and order written a second time,
in Python, as the oracle the Rust core is checked against (bit for bit), and Suggest's former
Python path over a real engine (`path`). Not used by the service, which ranks in the core
alone (docs/ranking.md, Pipeline). In `testing/` because benchmarks replay it too
(`benches/calibrate/ranking.py`, `benches/bench_context.py`) and never import `tests`."""
