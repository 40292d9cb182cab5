"""The benchmarks: one module per question, the shared parts in `benchmarks.harness`.

Run one from the repository root as `python -m benchmarks.<name>`; benchmarks/README.md indexes them.
"""
