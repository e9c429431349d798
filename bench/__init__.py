"""Benchmarks: each script prints tables and rewrites its own section of docs/benchmarks.md."""
