"""Running the stub as a process: as a child of `detok serve`, or standalone next to a `detok pool`.

As a child, the start-up overlaps the pool's: the stub loads its tokenizer and workload while the
workers load theirs, then gets the pool's endpoints over the pipe, binds its request inbox and
reports ready. Pipe messages are JSON (no pickle). SIGINT is ignored (Ctrl-C reaches the whole
process group; the parent decides), SIGTERM stops the loop, and the kernel stops the stub if the
parent dies.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from multiprocessing.connection import Connection

import msgspec
import zmq

from detok.scheduler.client import SchedulerClient
from detok.wire.security import CurveKeys, SocketSecurity
from detok.worker.lifecycle import StopFlag, die_with_parent, install_signal_handlers
from scheduler_stub.generation import primary_eos_id
from scheduler_stub.stub import RequestInbox, SchedulerStub, StepPolicy, run_loop
from scheduler_stub.workload import Workload, make_workload

log = logging.getLogger("scheduler_stub")


@dataclasses.dataclass(frozen=True)
class StubConfig:
    tokenizer: str
    requests_endpoint: str = ""  # where frontends send requests; under `detok serve`, sent over the pipe
    workload: str = "corpus"
    policy: StepPolicy = StepPolicy()
    end_probability: float = 0.0  # random workload: chance of EOS per token
    log_level: str = "WARNING"
    parent_pid: int = 0
    keys: CurveKeys | None = None  # deployment keys for tcp endpoints (detok.wire.security)
    insecure: bool = False  # tcp without keys, explicitly
    chat_template: str | None = None  # the served chat template (the echo workload finds the user turn by it)


class PoolEndpoints(msgspec.Struct):
    workers: list[str]
    notify: str
    requests: str = ""  # the stub's own inbox, if the parent chooses it


class StubLoaded(msgspec.Struct, tag="loaded"):
    pass


STARTUP_WAIT_S = 5.0  # at most this long for every worker to reach the client before "ready"


class StubReady(msgspec.Struct, tag="ready"):
    requests_endpoint: str


class StubFailed(msgspec.Struct, tag="failed"):
    error: str


StubStatus = StubLoaded | StubReady | StubFailed


def load_workload(cfg: StubConfig) -> tuple[Workload, frozenset[int], int | None]:
    from detok.tokenizer.factory import load_tokenizer

    tok = load_tokenizer(cfg.tokenizer, chat_template=cfg.chat_template) if cfg.chat_template else load_tokenizer(cfg.tokenizer)
    return make_workload(cfg.workload, tok, cfg.end_probability), tok.eos_token_ids, primary_eos_id(tok)


def child_main(cfg: StubConfig, conn: Connection) -> None:
    """Entry point of the stub process under `detok serve` (multiprocessing spawn target)."""
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    die_with_parent(cfg.parent_pid)
    stop = StopFlag()
    install_signal_handlers(stop, handle_sigint=False)
    encode = msgspec.json.encode
    try:
        workload, eos_ids, end_id = load_workload(cfg)
    except Exception as e:
        conn.send_bytes(encode(StubFailed(f"{type(e).__name__}: {e}")))
        raise SystemExit(1) from None
    conn.send_bytes(encode(StubLoaded()))
    try:
        endpoints = msgspec.json.decode(conn.recv_bytes(), type=PoolEndpoints)
    except (EOFError, OSError):
        return  # the parent gave up before the pool was ready
    ctx = zmq.Context()
    client = SchedulerClient(endpoints.workers, endpoints.notify, context=ctx, keys=cfg.keys, insecure=cfg.insecure)
    try:
        inbox = RequestInbox(ctx, endpoints.requests or cfg.requests_endpoint,
                             security=SocketSecurity(cfg.keys, cfg.insecure))
    except (zmq.ZMQError, ValueError) as e:
        conn.send_bytes(encode(StubFailed(f"cannot bind {endpoints.requests or cfg.requests_endpoint}: {e}")))
        client.close()
        ctx.term()
        raise SystemExit(1) from None
    # the workers reach this new client at their next reconnect: stop notices of the first steps
    # would come late without this (bounded: a slow worker is the supervisor's business)
    client.wait_for_workers(STARTUP_WAIT_S)
    conn.send_bytes(encode(StubReady(inbox.endpoint)))
    _stop_when_pipe_closes(conn, stop)
    stub = SchedulerStub(client, workload, eos_ids, cfg.policy, end_id)
    try:
        run_loop(stub, inbox, lambda: bool(stop))
    finally:
        log.info("scheduler stub stopping (%s): %s", stop.reason, stub.stats)
        inbox.close()
        client.close()
        ctx.term()


def _stop_when_pipe_closes(conn: Connection, stop: StopFlag) -> None:
    """Nothing more comes on the pipe after start-up: its end-of-file means the parent closed it
    (an orderly stop) or died."""

    def watch() -> None:
        try:
            while True:
                conn.recv_bytes()
        except (EOFError, OSError):
            stop.set("the parent closed the pipe")

    threading.Thread(target=watch, name="detok-stub-parent-watch", daemon=True).start()


def run_standalone(cfg: StubConfig, endpoints: PoolEndpoints) -> int:
    """`python -m scheduler_stub run`: serve frontends next to a separately started pool."""
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    stop = StopFlag()
    install_signal_handlers(stop, handle_sigint=True)
    workload, eos_ids, end_id = load_workload(cfg)
    ctx = zmq.Context()
    client = SchedulerClient(endpoints.workers, endpoints.notify, context=ctx, keys=cfg.keys, insecure=cfg.insecure)
    inbox = RequestInbox(ctx, cfg.requests_endpoint, security=SocketSecurity(cfg.keys, cfg.insecure))
    print(f"scheduler stub: frontends send requests to {inbox.endpoint}", flush=True)
    stub = SchedulerStub(client, workload, eos_ids, cfg.policy, end_id)
    try:
        run_loop(stub, inbox, lambda: bool(stop))
    finally:
        inbox.close()
        client.close()
        ctx.term()
    print(f"scheduler stub stopped: {stub.stats}", flush=True)
    return 0
