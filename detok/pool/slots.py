"""What the supervisor knows of its worker processes and slots, how it reports them, and how it stops them."""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Literal

from detok.metrics import mark_process_dead

log = logging.getLogger("detok.pool")


class PoolStartError(RuntimeError):
    """A worker could not start (e.g. the tokenizer does not load), or the pool timed out starting."""


@dataclass(eq=False)
class WorkerProc:
    process: BaseProcess
    conn: Connection | None
    state: Literal["loading", "spare", "assigned", "serving"] = "loading"
    slot: int | None = None
    last_seen: float = 0.0  # monotonic time of its last message (heartbeats included) or assignment
    stalled: bool = False
    kill_cause: str = ""  # set when the supervisor kills it (a stall)

    @property
    def pid(self) -> int:
        return self.process.pid or 0


@dataclass(eq=False)
class Slot:
    index: int
    endpoint: str
    generation: int = 0
    proc: WorkerProc | None = None
    cause: str = ""  # why the previous process died
    died_at: float = 0.0
    died_wall: float = 0.0  # time.time() of the same moment, for the replacement's recovery time
    listening: str = ""  # the address the worker's socket is bound to (a wildcard host stays one)


@dataclass
class SlotInfo:
    """A snapshot of one slot for callers (tests, the CLI)."""

    index: int
    endpoint: str
    pid: int | None
    serving: bool
    generation: int
    stalled: bool = False  # its process missed heartbeats for the stall bound
    state: str = "serving"  # serving | starting (empty, or the replacement not ready yet) | stalled
    listening: str = ""  # the address the worker's socket is bound to (`endpoint` is where to connect)


@dataclass
class PoolStatus:
    failure: str = ""
    restarts: int = 0
    restart_seconds: list[float] = field(default_factory=list)  # death seen -> replacement ready
    stall_replacements: int = 0


def slot_info(s: Slot) -> SlotInfo:
    p = s.proc
    serving = bool(p and p.state == "serving")
    stalled = bool(p and p.stalled)
    state = "stalled" if stalled else "serving" if serving else "starting"
    return SlotInfo(s.index, s.endpoint, p.pid if p else None, serving and not stalled, s.generation, stalled, state,
                    s.listening)


def exit_cause(exitcode: int | None) -> str:
    if exitcode is None:
        return "vanished"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def stop_processes(procs: list[WorkerProc], stop: bytes, timeout_s: float, metrics_dir: str | None) -> None:
    """Serving workers get `stop` (a `StopWorker`: they drain, finish live requests with an error and
    close); loading and spare processes get SIGTERM, whose default action they keep (they hold
    nothing). Wait up to `timeout_s`, then SIGKILL stragglers."""
    for p in procs:
        serving = p.state in ("assigned", "serving")
        if serving and p.conn is not None:
            try:
                p.conn.send_bytes(stop)
            except OSError:
                serving = False  # it is gone already
        if not serving and p.process.is_alive():
            try:
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.process.join(max(0.0, deadline - time.monotonic()))
        if p.process.is_alive():
            log.warning("worker process %d did not stop in %.1f s: killing it", p.pid, timeout_s)
            p.process.kill()
            p.process.join(1.0)
        if p.conn is not None:
            p.conn.close()
            p.conn = None
        if metrics_dir and p.pid:
            mark_process_dead(p.pid, metrics_dir)
