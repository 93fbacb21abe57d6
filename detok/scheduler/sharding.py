"""Which worker holds a request: the rid's Fibonacci hash scaled to the number of workers, stable
across processes and restarts; consecutive rids spread evenly (three-distance theorem), random rids
like a random hash. Fixed forever: a rid must never move to another worker."""

from __future__ import annotations

import numpy as np

_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: Fibonacci hashing
_MASK64 = (1 << 64) - 1
_NP_GOLDEN = np.uint64(_GOLDEN)


def shard_of(rid: int, workers: int) -> int:
    """The worker index of a rid: Fibonacci hash, top 32 bits scaled to [0, workers)."""
    return ((((rid * _GOLDEN) & _MASK64) >> 32) * workers) >> 32


def shard_array(rids: np.ndarray, workers: int) -> np.ndarray:
    """`shard_of` for a uint64 array, vectorised (same values)."""
    with np.errstate(over="ignore"):
        top = (rids.astype(np.uint64, copy=False) * _NP_GOLDEN) >> np.uint64(32)
    return ((top * np.uint64(workers)) >> np.uint64(32)).astype(np.intp)
