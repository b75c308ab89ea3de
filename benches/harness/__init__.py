"""Benchmark harness: the suites' processes, workloads, data readers and vector caches."""
