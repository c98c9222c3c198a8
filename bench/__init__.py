"""Benchmarks (`make bench` runs each top-level `bench/*.py` script; helpers live in bench/lib)."""
