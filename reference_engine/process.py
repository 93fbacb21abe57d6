"""The engine as a process: the scheduler child of `detok serve --model`, in the stub's place.

It speaks the stub's start-up protocol on the pipe (loaded -> pool endpoints -> ready; JSON, no
pickle), so `detok.serve.stack.Stack` starts, supervises and restarts it the same way: the
model loads while the detok workers load their tokenizers. SIGINT is ignored (the parent
decides), SIGTERM or the parent's end stops the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Final

import msgspec
import zmq

from detok.scheduler.client import SchedulerClient
from detok.wire.security import CurveKeys, SocketSecurity
from detok.worker.lifecycle import StopFlag, die_with_parent, install_signal_handlers
from reference_engine.engine import Engine
from reference_engine.limits import EngineLimits
from reference_engine.model import LlamaModel
from reference_engine.paths import resolve_model
from scheduler_stub.process import STARTUP_WAIT_S, PoolEndpoints, StubFailed, StubLoaded, StubReady
from scheduler_stub.stub import RequestInbox

log = logging.getLogger("reference_engine")

_IDLE_POLL_S: Final = 0.1  # how soon a stop is noticed while nothing runs


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    model: str  # a GGUF path or "smollm2"
    limits: EngineLimits = EngineLimits()
    log_level: str = "WARNING"
    parent_pid: int = 0
    keys: CurveKeys | None = None
    insecure: bool = False


def load_engine_parts(spec: str) -> tuple[LlamaModel, frozenset[int]]:
    """The model and the end-of-sequence ids of its own vocabulary (as the workers load it)."""
    from detok.tokenizer.factory import load_tokenizer

    path = resolve_model(spec)
    return LlamaModel.load(path), load_tokenizer(str(path)).eos_token_ids


def run_loop(engine: Engine, inbox: RequestInbox, should_stop: Callable[[], bool]) -> None:
    """Step as fast as the model goes while there is work; sleep on the inbox while there is none.
    Frontend messages (requests, aborts) are taken between steps."""
    while not should_stop():
        inbox.drain(engine)  # type: ignore[arg-type]  # anything with handle(message)
        if engine.idle:
            inbox.socket.poll(int(_IDLE_POLL_S * 1000))
            engine.client.poll()  # keep notices flowing (worker events, replays) while idle
            continue
        try:
            engine.step()
        except Exception as e:  # the batch it ran fails (with the reason); the loop goes on
            log.exception("reference engine: a step failed")
            engine.fail_running(f"the engine failed the request: {type(e).__name__}: {e}")


def child_main(cfg: EngineConfig, conn: Connection) -> None:
    """Entry point of the engine process under `detok serve --model` (multiprocessing spawn target)."""
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    die_with_parent(cfg.parent_pid)
    stop = StopFlag()
    install_signal_handlers(stop, handle_sigint=False)
    encode = msgspec.json.encode
    try:
        model, eos_ids = load_engine_parts(cfg.model)
    except Exception as e:
        conn.send_bytes(encode(StubFailed(f"{type(e).__name__}: {e}")))
        raise SystemExit(1) from None
    conn.send_bytes(encode(StubLoaded()))
    try:
        endpoints = msgspec.json.decode(conn.recv_bytes(), type=PoolEndpoints)
    except (EOFError, OSError):
        return
    ctx = zmq.Context()
    client = SchedulerClient(endpoints.workers, endpoints.notify, context=ctx, keys=cfg.keys, insecure=cfg.insecure)
    try:
        inbox = RequestInbox(ctx, endpoints.requests, security=SocketSecurity(cfg.keys, cfg.insecure))
    except (zmq.ZMQError, ValueError) as e:
        conn.send_bytes(encode(StubFailed(f"cannot bind {endpoints.requests}: {e}")))
        client.close()
        ctx.term()
        raise SystemExit(1) from None
    # the workers reach this new client at their next reconnect: stop notices of the first steps
    # would come late without this (bounded: a slow worker is the supervisor's business)
    client.wait_for_workers(STARTUP_WAIT_S)
    conn.send_bytes(encode(StubReady(inbox.endpoint)))
    _stop_when_pipe_closes(conn, stop)
    engine = Engine(model, client, eos_ids, cfg.limits)
    try:
        run_loop(engine, inbox, lambda: bool(stop))
    finally:
        log.info("reference engine stopping (%s): %s", stop.reason, engine.stats)
        inbox.close()
        client.close()
        ctx.term()


def run_standalone(cfg: EngineConfig, workers: list[str], notify: str, requests: str) -> int:
    """`python -m reference_engine run`: serve frontends next to a separately started pool."""
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    stop = StopFlag()
    install_signal_handlers(stop, handle_sigint=True)
    model, eos_ids = load_engine_parts(cfg.model)
    ctx = zmq.Context()
    client = SchedulerClient(workers, notify, context=ctx, keys=cfg.keys, insecure=cfg.insecure)
    inbox = RequestInbox(ctx, requests, security=SocketSecurity(cfg.keys, cfg.insecure))
    print(f"reference engine: frontends send requests to {inbox.endpoint}", flush=True)
    engine = Engine(model, client, eos_ids, cfg.limits)
    try:
        run_loop(engine, inbox, lambda: bool(stop))
    finally:
        inbox.close()
        client.close()
        ctx.term()
    print(f"reference engine stopped: {engine.stats}", flush=True)
    return 0


def _stop_when_pipe_closes(conn: Connection, stop: StopFlag) -> None:
    """Nothing more comes on the pipe after start-up: end-of-file means the parent closed it or died."""

    def watch() -> None:
        try:
            while True:
                conn.recv_bytes()
        except (EOFError, OSError):
            stop.set("the parent closed the pipe")

    threading.Thread(target=watch, name="detok-engine-parent-watch", daemon=True).start()
