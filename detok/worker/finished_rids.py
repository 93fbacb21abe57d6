"""Rids a worker finished recently: their late tokens (sent before the scheduler saw the finish)
are ignored quietly instead of being reported as unknown."""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

# Rids finished recently are remembered this long, and at most this many.
FINISHED_MEMORY_S = 60.0
FINISHED_MEMORY_MAX = 200_000


class FinishedRids:
    """rid -> when it finished, oldest first: evicted and pruned from the front in O(1)."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: OrderedDict[int, float] = OrderedDict()

    def __contains__(self, rid: object) -> bool:
        return rid in self._at

    def __len__(self) -> int:
        return len(self._at)

    def contains_many(self, rids: np.ndarray) -> np.ndarray:
        """Which of these uint64 rids are remembered (a bool array), without a lookup per rid."""
        if not self._at:
            return np.zeros(len(rids), dtype=bool)
        known = np.fromiter(self._at, dtype=np.uint64, count=len(self._at))
        return np.isin(rids, known)

    def pop(self, rid: int) -> None:
        self._at.pop(rid, None)

    def remember(self, rid: int) -> None:
        at = self._at
        at[rid] = time.monotonic()
        at.move_to_end(rid)  # a rid finished again is the newest, keeping the order by time
        if len(at) > FINISHED_MEMORY_MAX:
            at.popitem(last=False)

    def prune(self, now: float) -> None:
        at = self._at
        horizon = now - FINISHED_MEMORY_S
        while at:
            if next(iter(at.values())) > horizon:
                break
            at.popitem(last=False)
