"""What the scheduler client tells its scheduler about the detok side."""

from __future__ import annotations

from typing import NamedTuple

from detok.wire.params import Finish
from detok.wire.to_workers import EndRequest, Registration


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


class Staged:
    """What goes to each worker with its next message (a step or a replay): the registrations and
    ends staged for it, and the sequence number of the last message it was sent."""

    __slots__ = ("ends", "new", "seq")

    def __init__(self, workers: int) -> None:
        self.new: list[list[Registration]] = [[] for _ in range(workers)]
        self.ends: list[list[EndRequest]] = [[] for _ in range(workers)]
        self.seq = [0] * workers

    def take(self, w: int) -> tuple[list[Registration], list[EndRequest], int]:
        """Worker `w`'s staged registrations and ends, and the sequence number of the message
        that carries them (the next one)."""
        new, ends = self.new[w], self.ends[w]
        self.new[w], self.ends[w] = [], []
        self.seq[w] += 1
        return new, ends, self.seq[w]
