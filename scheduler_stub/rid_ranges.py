"""Rid ranges aborted as a whole (`AbortRange`: a dead frontend process's rid space), shared by
the stub and the reference engine.

The supervisor's AbortRange and the dead process's last GenerateRequests reach the scheduler on
different connections, in no set order: a request of the dead process read after its range was
aborted would run to `max_tokens` for a client that is gone. So a range stays dead for
`DEAD_RANGE_HOLD_S` and requests in it are refused meanwhile. It must not stay dead for ever: the
restart generation in a frontend's rids wraps (7 bits), so the same range comes back after 128
restarts - which, with the supervisor's restart backoff (5 s from the 5th quick death on; a
frontend that lived 30 s restarts at once), takes far longer than the hold. At most
`MAX_DEAD_RANGES` are held (the oldest go first): a frontend restarted without end leaks nothing.
"""

from __future__ import annotations

import collections
import time
from typing import Final

from detok.wire.to_scheduler import AbortRange
from scheduler_stub.validation import MAX_RID

DEAD_RANGE_HOLD_S: Final = 30.0
MAX_DEAD_RANGES: Final = 1024


def range_error(message: AbortRange) -> str | None:
    if not 0 <= message.first < message.end <= MAX_RID + 1:
        return f"rid range [{message.first}, {message.end}) is empty or outside [0, {MAX_RID}]"
    return None


class DeadRanges:
    """Recently aborted rid ranges: `holds(rid)` while within `hold_s` of their abort."""

    def __init__(self, hold_s: float = DEAD_RANGE_HOLD_S, max_ranges: int = MAX_DEAD_RANGES) -> None:
        self._hold_s = hold_s
        self._max = max_ranges
        self._ranges: collections.OrderedDict[tuple[int, int], float] = collections.OrderedDict()  # -> until

    def add(self, first: int, end: int) -> None:
        self._prune()
        self._ranges.pop((first, end), None)
        self._ranges[(first, end)] = time.monotonic() + self._hold_s
        while len(self._ranges) > self._max:
            self._ranges.popitem(last=False)

    def holds(self, rid: int) -> bool:
        if not self._ranges:  # the hot path: no frontend died lately
            return False
        self._prune()
        return any(first <= rid < end for first, end in self._ranges)

    def _prune(self) -> None:
        now = time.monotonic()
        while self._ranges and next(iter(self._ranges.values())) <= now:
            self._ranges.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ranges)
