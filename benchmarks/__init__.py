"""Benchmarks of txn_engine against pylance 14.0.2 (python -m benchmarks.run)."""
