"""pml benchmarks; `make bench` runs `python -m benches`."""
