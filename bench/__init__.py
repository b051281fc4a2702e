"""Benchmarks: scripts a person runs (``python -m bench.stream``, ``python -m bench.rooms``); see README.md."""
