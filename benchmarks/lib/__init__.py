"""Helpers and workers of the benchmark entry points (benchmarks/README.md): modules the entry points import, and
the one-run scripts they launch as subprocesses. Nothing here is a supported entry point of its own."""
