"""Rids a worker finished recently: their late tokens (sent before the scheduler saw the finish)
are ignored quietly instead of being reported as unknown. Each remembers the registration
generation it finished, so a replay does not reopen that request but does open a later
registration of the same rid."""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

# Rids finished recently are remembered this long, and at most this many.
FINISHED_MEMORY_S = 60.0
FINISHED_MEMORY_MAX = 200_000


class FinishedRids:
    """rid -> when it finished, oldest first: evicted and pruned from the front in O(1)."""

    __slots__ = ("_at", "_gen")

    def __init__(self) -> None:
        self._at: OrderedDict[int, float] = OrderedDict()
        self._gen: dict[int, int] = {}  # rid -> generation finished (rids with a non-zero one)

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
        self._gen.pop(rid, None)

    def finished(self, rid: int, gen: int) -> bool:
        """This very registration (rid, gen) finished here (gen 0: any registration of rid)."""
        return rid in self._at and (not gen or self._gen.get(rid) == gen)

    def remember(self, rid: int, gen: int = 0) -> None:
        at = self._at
        at[rid] = time.monotonic()
        at.move_to_end(rid)  # a rid finished again is the newest, keeping the order by time
        if gen:
            self._gen[rid] = gen
        else:
            self._gen.pop(rid, None)
        if len(at) > FINISHED_MEMORY_MAX:
            self._gen.pop(at.popitem(last=False)[0], None)

    def prune(self, now: float) -> None:
        at = self._at
        horizon = now - FINISHED_MEMORY_S
        while at:
            if next(iter(at.values())) > horizon:
                break
            self._gen.pop(at.popitem(last=False)[0], None)
