"""The benchmark suite: ``python -m benchmarks`` runs every scenario (see benchmarks/README.md)."""
