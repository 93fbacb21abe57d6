"""What a worker process is started with (picklable: it crosses the spawn boundary)."""

from __future__ import annotations

from dataclasses import dataclass

from detok.wire.security import CurveKeys


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker process needs; plain data so it crosses the spawn boundary."""

    tokenizer: str
    notify_endpoint: str | None = None  # the scheduler client's StopNotice endpoint (connect)
    idle_timeout_s: float = 300.0
    metrics_dir: str | None = None
    hwm: int = 10_000
    log_level: str = "WARNING"
    parent_pid: int = 0  # 0: standalone, no parent to die with
    orphan_cleanup_dir: str | None = None  # the pool's ipc dir, removed if the pool died first
    handle_sigint: bool = False
    keys: CurveKeys | None = None  # deployment keys for tcp sockets (detok.wire.security)
    insecure: bool = False  # tcp without keys, explicitly
    # the deployment's parsers (`DetokPool(reasoning_parser=, tool_parser=)`): checked against the
    # tokenizer at load, so a missing name or marker fails the start naming it
    reasoning_parser: str | None = None
    tool_parser: str | None = None
