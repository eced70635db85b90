"""Benchmark of qconvert on real architectures: `make bench`."""
