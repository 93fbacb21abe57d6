"""The log line of a malformed tool call (`detok.parsing.limits`: past a bound, or not the family's
format): the call ends as content, or closed to valid JSON once its name went out, and the request
goes on. Lines are rate-bounded per process: an output holding thousands of malformed calls costs
the log a line per interval, with the count of those left out."""

from __future__ import annotations

import logging
import time
from typing import Final

_log = logging.getLogger("detok.parsing")

LOG_INTERVAL_S: Final = 1.0  # at most one malformed-call line per interval
# what becomes of a call whose text breaks (the families' common rule)
ENDS_THERE: Final = "the call ends there: as content while its name is unknown, else with its arguments closed to valid JSON"


class _RateBound:
    __slots__ = ("last", "left_out")

    def __init__(self) -> None:
        self.last = -LOG_INTERVAL_S
        self.left_out = 0


_RATE = _RateBound()


def log_malformed(what: str, outcome: str) -> None:
    """Log `what` was wrong with a call and `outcome` (what became of it)."""
    now = time.monotonic()
    if now - _RATE.last < LOG_INTERVAL_S:
        _RATE.left_out += 1
        return
    left_out, _RATE.left_out, _RATE.last = _RATE.left_out, 0, now
    more = f" ({left_out} more since the last line)" if left_out else ""
    _log.warning("malformed tool call: %s; %s%s", what, outcome, more)
