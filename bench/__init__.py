"""Benchmarks of respot: each `python -m bench.<name>` writes bench/results/<name>.{json,md}."""
