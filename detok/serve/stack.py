"""The process tree behind `detok serve`: a detok worker pool and the scheduler stub, started
together (their tokenizer loads overlap), both supervised, and stopped together, leaving nothing
behind. With `model` set, the reference engine (a real model on CPU) takes the stub's place: same
start-up protocol on the pipe, same supervision below ("stub" then means that scheduler process).

    this process (frontend + pool supervisor thread + stub watcher thread)
     ├── detok worker 0 … N-1 (+ one loaded spare)     DetokPool
     └── scheduler stub                                 scheduler_stub.process.child_main
         or the reference engine                        reference_engine.launch.child_main

Supervision of the stub: a thread waits on its process; if it dies it is started again (after
`STUB_RESTART_BACKOFF_S[n]`, n = consecutive deaths within `_STUB_STABLE_S` of a start, so a
crash loop backs off up to 5 s) on the same endpoints, so the
frontend's sockets reconnect by themselves. The requests it was running are gone with it: each
restart increments `scheduler_generation`, which tells the frontend to fail what it had in flight
(the workers free those requests by their idle timeout). Workers are supervised by the pool.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec

from detok.pool.pool import DetokPool
from detok.pool.supervisor import STALL_TIMEOUT_S
from detok.serve.child_exit import has_exited, wait_for_exit
from detok.tokenizer.base import Tokenizer
from detok.wire.security import CurveKeys
from scheduler_stub.process import PoolEndpoints, StubConfig, StubFailed, StubLoaded, StubReady, StubStatus, child_main
from scheduler_stub.stub import StepPolicy

log = logging.getLogger("detok.serve")

_STUB_STOP_TIMEOUT_S: Final = 5.0
STUB_RESTART_BACKOFF_S: Final = (0.0, 0.5, 1.0, 2.0, 5.0)  # before the n-th consecutive quick restart
_STUB_STABLE_S: Final = 30.0  # a stub that served this long resets the backoff
_STUB_POLL_S: Final = 0.2
# A stub's death is acted on this long after it is seen, unless a stop comes meanwhile: a SIGTERM
# to the whole process group (systemd's default stop, `kill -TERM -PGID`) reaches the stub as it
# reaches this process, whose handler may run a moment after the stub is gone
_DEATH_GRACE_S: Final = 0.5

StubState = Literal["starting", "up", "restarting", "closed"]


class StackStartError(RuntimeError):
    """A part of the stack did not start (tokenizer, pool or scheduler stub); says which and why."""


@dataclasses.dataclass(frozen=True)
class StackConfig:
    tokenizer: str
    chat_template: str | None = None
    workers: int = 2
    spare: bool = True
    workload: str = "corpus"
    policy: StepPolicy = StepPolicy()
    metrics_dir: str | None = None
    log_level: str = "WARNING"
    model: str | None = None  # a GGUF: the reference engine runs it in the stub's place
    start_timeout_s: float = 120.0
    stall_timeout_s: float = STALL_TIMEOUT_S  # a worker silent this long is stalled (detok.pool.stalls)
    replace_stalled: bool = True
    reasoning_parser: str | None = None  # checked by each worker against the tokenizer at load
    tool_parser: str | None = None
    # the scheduler's request inbox bound here (tcp: for `detok frontend`s on other hosts), instead of
    # an ipc endpoint of the pool's; `keys` (a `detok keygen` directory) secure it and the workers'
    # connections to those frontends
    inbox: str | None = None
    keys: str | None = None
    insecure: bool = False


def local_endpoint(bound: str) -> str:
    """Where a process on this host connects to a tcp endpoint bound on every address."""
    for wildcard in ("tcp://0.0.0.0:", "tcp://*:"):
        if bound.startswith(wildcard):
            return "tcp://127.0.0.1:" + bound[len(wildcard):]
    return bound


class Stack:
    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg
        self.pool: DetokPool | None = None
        self.tokenizer: Tokenizer | None = None
        self.inbox_endpoint = ""  # where the scheduler binds its request inbox
        self.requests_endpoint = ""  # where this host's frontends connect to it
        self.receiver_endpoint = ""
        self.scheduler_generation = 0  # 1 once the stub serves, +1 at each restart
        self.stub_restarts = 0
        self._stub: BaseProcess | None = None
        self._stub_conn: Connection | None = None
        self._stub_state: StubState = "starting"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._closed = False

    # ---- start ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the stub, the pool and the frontend's tokenizer; return when all are ready."""
        deadline = time.monotonic() + self.cfg.start_timeout_s
        self._spawn_stub()
        loaded: dict[str, Tokenizer | BaseException] = {}
        loader = threading.Thread(target=self._load_tokenizer, args=(loaded,), name="detok-tokenizer-load", daemon=True)
        loader.start()
        try:
            self.pool = DetokPool(
                self.cfg.tokenizer,
                self.cfg.workers,
                spare=self.cfg.spare,
                metrics_dir=self.cfg.metrics_dir,
                log_level=self.cfg.log_level,
                start_timeout_s=self.cfg.start_timeout_s,
                stall_timeout_s=self.cfg.stall_timeout_s,
                replace_stalled=self.cfg.replace_stalled,
                reasoning_parser=self.cfg.reasoning_parser,
                tool_parser=self.cfg.tool_parser,
                keys=self.cfg.keys,
                insecure=self.cfg.insecure,
            )
        except Exception as e:
            raise StackStartError(str(e)) from None
        self.inbox_endpoint = self.cfg.inbox or self.pool.receiver_endpoint("scheduler")
        self.requests_endpoint = local_endpoint(self.inbox_endpoint)
        self.receiver_endpoint = self.pool.receiver_endpoint("frontend")
        self._handshake(deadline)
        loader.join(max(0.0, deadline - time.monotonic()))
        result = loaded.get("tokenizer")
        if isinstance(result, BaseException) or result is None:
            raise StackStartError(f"the frontend could not load the tokenizer: {result or 'timed out'}")
        self.tokenizer = result
        with self._lock:
            self.scheduler_generation = 1
            self._stub_state = "up"
        self._watcher = threading.Thread(target=self._watch_stub, name="detok-stub-watch", daemon=True)
        self._watcher.start()

    def _load_tokenizer(self, out: dict[str, Tokenizer | BaseException]) -> None:
        from detok.tokenizer.factory import load_tokenizer

        try:
            out["tokenizer"] = load_tokenizer(self.cfg.tokenizer, chat_template=self.cfg.chat_template)
        except BaseException as e:  # reported by start(), on the main thread
            out["tokenizer"] = e

    def _spawn_stub(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        target, cfg = self._scheduler_process()
        stub = ctx.Process(target=target, args=(cfg, child_conn), name="detok-scheduler", daemon=True)
        with self._lock:
            if self._stopping.is_set():
                parent_conn.close()
                child_conn.close()
                raise StackStartError("the stack is closing")
            stub.start()
            self._stub, self._stub_conn = stub, parent_conn
        child_conn.close()

    def _scheduler_process(self) -> tuple[Callable[[Any, Connection], None], object]:
        """The scheduler child's entry point and config: the reference engine on `model`, else the
        stub. Both speak the same start-up protocol on the pipe."""
        if self.cfg.model is not None:
            from reference_engine.launch import child_main as engine_main
            from reference_engine.launch import engine_config_json

            return engine_main, engine_config_json(self.cfg.model, self.cfg.log_level, os.getpid(), self.cfg.keys,
                                                   self.cfg.insecure)
        cfg = StubConfig(
            tokenizer=self.cfg.tokenizer,
            chat_template=self.cfg.chat_template,
            workload=self.cfg.workload,
            policy=self.cfg.policy,
            log_level=self.cfg.log_level,
            parent_pid=os.getpid(),
            keys=CurveKeys.load(self.cfg.keys) if self.cfg.keys else None,
            insecure=self.cfg.insecure,
        )
        return child_main, cfg

    def _handshake(self, deadline: float) -> None:
        """The stub loaded: give it the pool's endpoints and wait until it serves."""
        assert self.pool is not None
        self._expect_stub(StubLoaded, deadline)
        assert self._stub_conn is not None
        self._stub_conn.send_bytes(
            msgspec.json.encode(PoolEndpoints(self.pool.endpoints, self.pool.notify_endpoint, self.inbox_endpoint))
        )
        self._expect_stub(StubReady, deadline)

    def _expect_stub(self, kind: type, deadline: float) -> None:
        assert self._stub is not None and self._stub_conn is not None
        decoder = msgspec.json.Decoder(StubStatus)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StackStartError(f"the scheduler stub did not start within {self.cfg.start_timeout_s:g} s")
            if self._stopping.is_set():
                raise StackStartError("the stack is closing")
            if self._stub_conn.poll(min(left, _STUB_POLL_S)):
                try:
                    status = decoder.decode(self._stub_conn.recv_bytes())
                except EOFError:
                    status = StubFailed(f"it exited with code {self._stub.exitcode}")
                if isinstance(status, StubFailed):
                    raise StackStartError(f"the scheduler stub failed to start: {status.error}")
                if isinstance(status, kind):
                    return
            elif not self._stub.is_alive():
                raise StackStartError(f"the scheduler stub exited with code {self._stub.exitcode} while starting")

    # ---- stub supervision -------------------------------------------------------------------------
    def _watch_stub(self) -> None:
        quick_deaths = 0
        up_since = time.monotonic()
        while not self._stopping.is_set():
            stub = self._stub
            assert stub is not None
            stub.join(_STUB_POLL_S)
            if stub.exitcode is None or self._stopping.wait(_DEATH_GRACE_S):
                continue
            quick_deaths = 0 if time.monotonic() - up_since >= _STUB_STABLE_S else quick_deaths + 1
            with self._lock:
                self._stub_state = "restarting"
            log.error("the scheduler stub (pid %s) exited with code %s; restarting it", stub.pid, stub.exitcode)
            self._retire_stub()
            delay = STUB_RESTART_BACKOFF_S[min(quick_deaths, len(STUB_RESTART_BACKOFF_S) - 1)]
            if self._stopping.wait(delay):
                return
            try:
                self._spawn_stub()
                self._handshake(time.monotonic() + self.cfg.start_timeout_s)
            except StackStartError as e:
                if self._stopping.is_set():
                    return
                log.error("the scheduler stub did not come back: %s", e)
                self._kill_stub()  # so the next round sees a dead process and retries
                up_since = time.monotonic()
                continue
            up_since = time.monotonic()
            with self._lock:
                self.scheduler_generation += 1
                self.stub_restarts += 1
                self._stub_state = "up"
            log.warning("the scheduler stub is back (pid %s, generation %d)", self._stub.pid, self.scheduler_generation)

    def _retire_stub(self) -> None:
        if self._stub_conn is not None:
            self._stub_conn.close()
            self._stub_conn = None
        if self._stub is not None:
            self._stub.join(1.0)

    def _kill_stub(self) -> None:
        if self._stub is not None and self._stub.exitcode is None:
            self._stub.kill()
            self._stub.join(1.0)

    # ---- running --------------------------------------------------------------------------------
    @property
    def stub_pid(self) -> int | None:
        return None if self._stub is None else self._stub.pid

    def pids(self) -> list[int]:
        """Every child process of the stack (workers, spare, stub)."""
        pids = self.pool.all_pids() if self.pool is not None else []
        if self._stub is not None and self._stub.pid and not has_exited(self._stub):
            pids.append(self._stub.pid)
        return pids

    def health(self) -> dict[str, bool]:
        """"pool": every slot has a serving, non-stalled process; "scheduler": the stub serves."""
        pool_up = self.pool is not None and not self.pool.closed and all(s.serving for s in self.pool.slots())
        return {"pool": pool_up, "scheduler": self.scheduler_serving()}

    def scheduler_serving(self) -> bool:
        """health()["scheduler"] alone."""
        stub = self._stub
        with self._lock:
            return self._stub_state == "up" and stub is not None and not has_exited(stub)

    def health_detail(self) -> dict[str, object]:
        """Per-part state for /health (JSON-able)."""
        stub = self._stub
        with self._lock:
            state = self._stub_state
            if state == "up" and (stub is None or has_exited(stub)):
                state = "restarting"  # died a moment ago; the watcher is about to notice
            scheduler = {"state": state, "pid": stub.pid if stub is not None else None,
                         "generation": self.scheduler_generation, "restarts": self.stub_restarts}
        workers: list[dict[str, object]] = []
        pool: dict[str, object] = {"workers": workers}
        if self.pool is not None and not self.pool.closed:
            workers.extend({"index": s.index, "state": s.state, "pid": s.pid, "generation": s.generation}
                           for s in self.pool.slots())
            pool.update(restarts=self.pool.restarts, stall_replacements=self.pool.stall_replacements)
        return {"scheduler": scheduler, "pool": pool}

    # ---- stop -----------------------------------------------------------------------------------
    def expect_stop(self) -> None:
        """A stop signal reached this process (called from its handler): the stack is about to be
        closed, so a child that dies from now on (the signal may have reached it too) is not
        restarted. Called from a signal handler in the main thread: it sets an Event (whose lock
        the main thread holds only within close(), when the handlers are already off) and a flag."""
        self._stopping.set()
        if self.pool is not None:
            self.pool.expect_stop()

    def close(self) -> None:
        """Stop the stub (SIGTERM, bounded wait, SIGKILL), then the pool. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._stopping.set()
            self._stub_state = "closed"
        if self._watcher is not None:
            self._watcher.join(_STUB_STOP_TIMEOUT_S)
        if self._stub_conn is not None:
            self._stub_conn.close()  # the stub's parent-pipe watch stops its loop too
        if self._stub is not None:
            # (by its sentinel: the health board may be asking for its state meanwhile, see child_exit)
            if not has_exited(self._stub):
                self._stub.terminate()
            if wait_for_exit([self._stub], time.monotonic() + _STUB_STOP_TIMEOUT_S):
                log.warning("the scheduler stub did not stop within %g s; killing it", _STUB_STOP_TIMEOUT_S)
                self._stub.kill()
            self._stub.join(1.0)
        if self.pool is not None:
            self.pool.close()
