"""Benchmarks (not tests): `python -m bench` reproduces bench/RESULTS.md."""
