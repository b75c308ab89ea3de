"""Profilers: where the time goes; they print and write nothing to benches/results/."""
