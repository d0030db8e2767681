"""Benchmarks of respot, each run as `python -m bench.<name>` (see bench/README.md)."""
