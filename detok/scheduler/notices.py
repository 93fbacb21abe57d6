"""What the scheduler client tells its scheduler about the detok side."""

from __future__ import annotations

from typing import NamedTuple

from detok.wire.params import Finish


class Stopped(NamedTuple):
    """A request the detok side finished: the scheduler stops generating it."""

    rid: int
    finish: Finish


class WorkerState(NamedTuple):
    """What the client knows of one worker: its process (`instance`), whether that process holds
    the shard's state (`synced`), the last batch it acknowledged, and when it was last heard of."""

    worker: int
    instance: int
    synced: bool
    acked_seq: int
    last_heard: float  # time.monotonic() of its last status (0: never)
    down: bool  # the supervisor reported it dead and no process serves the slot yet
    replays: int  # replays sent to this worker slot
