"""Helpers shared by the benchmarks; nothing here is a benchmark itself."""
