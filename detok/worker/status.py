"""A worker's `WorkerStatus` notices to the scheduler client: replay requests, acknowledgements and
liveness, each at its own pace.

- While the process waits for its replay it asks again every `ASK_EVERY_S` (the first ask or the
  answer may be lost with a dying peer; the client answers each instance at most every 0.5 s).
- Once synced, progress (`seq`, the last batch handled) is acknowledged at most every `ACK_EVERY_S`:
  the client keeps ended requests for replay until their end is acknowledged, so acknowledgements
  bound that memory.
- With nothing new, a status still goes out every `HEARTBEAT_S`: the client's view of which
  standalone workers are alive.
"""

from __future__ import annotations

from typing import Final

from detok.wire.to_scheduler import WorkerStatus

ASK_EVERY_S: Final = 0.2
ACK_EVERY_S: Final = 0.05
HEARTBEAT_S: Final = 1.0


class StatusReporter:
    def __init__(self, worker: int, instance: int, pid: int, generation: int, died_at: float) -> None:
        self._worker = worker
        self._instance = instance
        self._pid = pid
        self._generation = generation
        self._died_at = died_at
        self._sent_at = float("-inf")
        self._sent_seq = -1

    def due(self, now: float, synced: bool, seq: int) -> WorkerStatus | None:
        """The status to send now, if one is due."""
        since = now - self._sent_at
        if synced:
            if not (since >= HEARTBEAT_S or (seq != self._sent_seq and since >= ACK_EVERY_S)):
                return None
        elif since < ASK_EVERY_S:
            return None
        self._sent_at, self._sent_seq = now, seq
        return WorkerStatus(self._worker, self._instance, synced, seq, self._pid, self._generation, self._died_at)
