"""The worker process: sockets around `WorkerCore`, the readiness handshake, clean shutdown.

Sockets: one PULL bound on the worker's input endpoint (DetokBatch / FailRequests from the
scheduler client), one PUSH per frontend connected on first use (`Registration.reply_to`), one
PUSH connected to the scheduler client's notice endpoint. Sends never block: a full peer queue
drops the message and counts it (a stuck frontend must not stall everyone else's requests). tcp
sockets use CURVE with the deployment keys (`detok.wire.security`).

Frontend sockets are bounded: at most `MAX_FRONTENDS` open at once, least recently used first to
go, never one whose frontend has live requests; a registration naming a new frontend beyond that
(or an endpoint that is malformed or cannot be connected) finishes that request with an error,
reported to the scheduler in the StopNotice (its frontend cannot be reached).

Under a pool, the main loop sends a heartbeat on the supervisor pipe every `HEARTBEAT_INTERVAL_S`,
so the supervisor sees a stuck loop, not just a live process.

Under a pool (`pool_child_main`) the process loads the tokenizer, reports `WorkerLoaded`, waits
for an `AssignSlot` (a spare waits here until a slot dies), binds, reports `WorkerReady`.
Standalone (`serve`), it binds at once.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Final

import msgspec

from detok import wire
from detok.worker.config import WorkerConfig
from detok.worker.core import warmed_table
from detok.worker.lifecycle import (
    StopFlag,
    die_with_parent,
    install_signal_handlers,
    orphaned,
    watch_parent_pipe,
)
from detok.worker.serving_loop import (
    POLL_MS,
    ServingLoop,
)

log = logging.getLogger("detok.worker")

_PARENT_EXIT_WAIT_S: Final = 2.0  # after a SIGTERM: how long to wait for the pipe to say whether the pool died


def serve(cfg: WorkerConfig, worker: int, endpoint: str) -> int:
    """Run one standalone worker until SIGTERM / SIGINT (the `detok worker` command)."""
    _setup_process(cfg)
    stop = StopFlag()
    install_signal_handlers(stop, handle_sigint=True)
    tokenizer, _plan, seconds = _load(cfg)
    log.warning("worker %d: tokenizer %s loaded in %.2f s", worker, cfg.tokenizer, seconds)
    runner = ServingLoop(cfg, tokenizer, worker, endpoint, stop)
    _freeze_heap()
    security = "CURVE" if cfg.keys is not None and runner.bound.startswith("tcp://") else (
        "INSECURE: no keys" if runner.bound.startswith("tcp://") else "ipc")
    print(f"detok worker {worker} listening on {runner.bound} ({security})", flush=True)
    return runner.run()


def pool_child_main(cfg: WorkerConfig, conn: Connection) -> None:
    """Entry point of a pool's worker process (multiprocessing spawn target)."""
    # First: a process spawned just as the pool died must exit before it creates anything (the
    # metrics directory) inside the pool's ipc directory, which a sibling may be removing.
    die_with_parent(cfg.parent_pid)
    _setup_process(cfg)
    stop = StopFlag()
    # Until it serves, the process holds nothing: SIGTERM keeps its default action (exit now, even
    # in the middle of a tokenizer load). Ctrl-C is the parent's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    encoder = wire.new_encoder()
    pid = os.getpid()

    def report(msg: msgspec.Struct) -> None:
        try:
            conn.send_bytes(encoder.encode(msg))
        except OSError:  # the pool closed while this process was starting
            raise SystemExit(0) from None

    try:
        tokenizer, plan, seconds = _load(cfg)
        table = warmed_table(tokenizer)  # before "loaded": a spare takes over a slot ready to serve
    except Exception as e:  # noqa: BLE001 - whatever it is, the supervisor must hear of it
        report(wire.WorkerStartFailed(pid, f"{type(e).__name__}: {e}"))
        raise SystemExit(1) from None
    _freeze_heap()
    report(wire.WorkerLoaded(pid, plan.strategy, seconds))
    assignment = _wait_assignment(conn, stop)
    if assignment is None:
        return  # the pool closed (or died) while this process was a spare
    install_signal_handlers(stop, handle_sigint=cfg.handle_sigint)  # from now on SIGTERM drains
    try:
        runner = ServingLoop(cfg, tokenizer, assignment.worker, assignment.endpoint, stop, assignment, table,
                         heartbeat=_heartbeat_sender(conn, encoder.encode(wire.WorkerHeartbeat(pid))))
    except Exception as e:  # noqa: BLE001 - whatever it is, the supervisor must hear of it
        report(wire.WorkerStartFailed(pid, f"{type(e).__name__}: {e}"))
        raise SystemExit(1) from None
    report(wire.WorkerReady(assignment.worker, pid, runner.bound))
    watch = watch_parent_pipe(conn, stop)
    code = runner.run()
    if cfg.orphan_cleanup_dir and not watch.pool_closing:
        # The kernel's parent-death SIGTERM comes as the pool's spawning thread exits, a moment
        # before the pool process is gone (its pipe closes, this process is re-parented): wait for
        # that verdict, else a dying pool would leave its ipc directory behind.
        watch.wait_verdict(_PARENT_EXIT_WAIT_S)
    if cfg.orphan_cleanup_dir and not watch.pool_closing and (watch.parent_gone or orphaned(cfg.parent_pid)):
        # The pool died without closing: the last of its workers out removes its ipc files.
        shutil.rmtree(cfg.orphan_cleanup_dir, ignore_errors=True)
    raise SystemExit(code)


def _heartbeat_sender(conn: Connection, beat: bytes) -> Callable[[], None]:
    def send() -> None:
        try:
            conn.send_bytes(beat)
        except OSError:
            pass  # the pool is gone: the pipe watch stops the loop

    return send


def _wait_assignment(conn: Connection, stop: StopFlag) -> wire.AssignSlot | None:
    decoder = wire.supervisor_command_decoder()
    try:
        while not stop:
            if conn.poll(POLL_MS / 1000):
                command = decoder.decode(conn.recv_bytes())
                return command if isinstance(command, wire.AssignSlot) else None
    except (EOFError, OSError):
        pass
    return None


def _freeze_heap() -> None:
    """Move everything allocated so far (tokenizer, decode tables: hundreds of thousands of
    objects) out of the collector's reach: full collections then walk only request state, and do
    not pause a batch for milliseconds."""
    gc.collect()
    gc.freeze()


def _setup_process(cfg: WorkerConfig) -> None:
    if cfg.metrics_dir:
        from detok.metrics import (
            use_metrics_dir,  # before anything imports prometheus_client
        )

        use_metrics_dir(cfg.metrics_dir)
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")


def _load(cfg: WorkerConfig) -> tuple[Any, Any, float]:
    from detok.stream.strategy import prepare_decoding
    from detok.tokenizer.factory import load_tokenizer

    t0 = time.perf_counter()
    tokenizer = load_tokenizer(cfg.tokenizer)
    if cfg.reasoning_parser or cfg.tool_parser:
        from detok.parsing.tokens import check_parsers

        check_parsers(tokenizer, cfg.reasoning_parser, cfg.tool_parser)
    plan = prepare_decoding(tokenizer)  # once, before ready: never on a request's path
    return tokenizer, plan, time.perf_counter() - t0


