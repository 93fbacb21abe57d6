"""detok benchmarks: runnable as scripts (`python bench/pool.py`) or as modules (`python -m bench.pool`)."""
