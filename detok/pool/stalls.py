"""The supervisor's stall check: a slot's process that has sent nothing (heartbeats come every
0.5 s) for `stall_timeout_s` is reported stalled and, unless configured not to, killed with SIGKILL,
so that the usual death path replaces it. A mixin of `detok.pool.supervisor.Supervisor`."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from detok.pool.slots import WorkerProc

log = logging.getLogger("detok.pool")

# A slot's process that sends nothing (heartbeats come every 0.5 s) for this long is stalled. Far
# above any batch's processing time (a 400K-rid batch takes ~1 s), so load never looks like a stall.
STALL_TIMEOUT_S: Final = 10.0


class StallWatch:
    if TYPE_CHECKING:  # the supervisor's state this mixin reads and writes
        _procs: list[WorkerProc]
        _stall_timeout_s: float
        _replace_stalled: bool
        _lock: threading.Condition
        _status: Any
        _metrics: Any

    def _check_stalls(self) -> None:
        """Report (and, if configured, kill) slot processes silent for longer than the bound."""
        now = time.monotonic()
        for p in self._procs:
            if p.slot is None or p.stalled or p.state not in ("assigned", "serving"):
                continue
            silent = now - p.last_seen
            if silent <= self._stall_timeout_s:
                continue
            self._set_stalled(p, True)
            if not self._replace_stalled:
                log.error("detok worker %d (pid %d) stalled: no heartbeat for %.1f s", p.slot, p.pid, silent)
                continue
            p.kill_cause = f"stalled (no heartbeat for {silent:.1f} s) and was killed with SIGKILL"
            log.error("detok worker %d (pid %d) %s", p.slot, p.pid, p.kill_cause)
            with self._lock:
                self._status.stall_replacements += 1
            if self._metrics is not None:
                self._metrics.replaced(p.slot)
            try:
                os.kill(p.pid, signal.SIGKILL)  # its sentinel then takes the usual death path
            except ProcessLookupError:
                pass

    def _set_stalled(self, p: WorkerProc, stalled: bool) -> None:
        with self._lock:
            p.stalled = stalled
            self._lock.notify_all()
        if self._metrics is not None and p.slot is not None:
            self._metrics.stalled(p.slot, stalled)
