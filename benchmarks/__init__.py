"""awa's own benchmark runner: ``python -m benchmarks`` (see benchmarks/README.md)."""
