"""Benchmark scripts, run from the repository's root as `python -m benchmarks.NAME` (figures in
RESULTS.md, each table headed by its command). Their timing is kompute_dml/bench/timing.py's."""
