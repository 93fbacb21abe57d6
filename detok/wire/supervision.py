"""Between a worker process and the pool supervisor, over the process's private pipe (both ways).

    worker     -> supervisor  SupervisorInbound = WorkerLoaded | WorkerReady | WorkerStartFailed | WorkerHeartbeat
    supervisor -> worker      SupervisorCommand = AssignSlot | StopWorker
"""

from __future__ import annotations

import msgspec


class WorkerLoaded(msgspec.Struct, tag="loaded", array_like=True, gc=False, frozen=True):
    """A worker process loaded its tokenizer and waits for a slot (a spare, until assigned)."""

    pid: int
    strategy: str  # decode strategy chosen for the tokenizer ("bytes" or "window")
    load_seconds: float


class AssignSlot(msgspec.Struct, tag="assign", array_like=True, gc=False, frozen=True):
    """Supervisor -> worker process: serve slot `worker` (bind `endpoint`)."""

    worker: int
    endpoint: str
    generation: int  # 1 at pool start, +1 per restart of the slot
    restart_cause: str = ""  # why the previous process of this slot died
    died_at: float = 0.0  # wall clock when the previous process was seen dead (recovery time)


class StopWorker(msgspec.Struct, tag="stop_worker", array_like=True, gc=False, frozen=True):
    """Supervisor -> worker process: the pool is closing; drain, finish what is live, exit. (A pipe
    that closes without this message means the pool died: the worker then also removes the pool's
    ipc directory.)"""

    reason: str = "pool closing"


SupervisorCommand = AssignSlot | StopWorker


class WorkerReady(msgspec.Struct, tag="ready", array_like=True, gc=False, frozen=True):
    worker: int
    pid: int
    endpoint: str  # the input endpoint actually bound (tcp wildcard port resolved)


class WorkerStartFailed(msgspec.Struct, tag="start_failed", array_like=True, gc=False, frozen=True):
    pid: int
    error: str


class WorkerHeartbeat(msgspec.Struct, tag="heartbeat", array_like=True, gc=False, frozen=True):
    """A serving worker's main loop is running (sent every `HEARTBEAT_INTERVAL_S`): a process that
    is alive but stuck (SIGSTOP, a hung call) stops sending it and the supervisor replaces it."""

    pid: int


SupervisorInbound = WorkerLoaded | WorkerReady | WorkerStartFailed | WorkerHeartbeat


def supervisor_inbound_decoder() -> msgspec.msgpack.Decoder[
    WorkerLoaded | WorkerReady | WorkerStartFailed | WorkerHeartbeat
]:
    return msgspec.msgpack.Decoder(SupervisorInbound)


def supervisor_command_decoder() -> msgspec.msgpack.Decoder[AssignSlot | StopWorker]:
    return msgspec.msgpack.Decoder(SupervisorCommand)
