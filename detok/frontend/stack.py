"""The process tree behind `detok serve`: a detok worker pool and the scheduler stub, started
together (their tokenizer loads overlap) and stopped together, leaving nothing behind.

    this process (frontend + pool supervisor thread)
     ├── detok worker 0 … N-1 (+ one loaded spare)     DetokPool
     └── scheduler stub                                 scheduler_stub.process.child_main
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

import msgspec

from detok.pool import DetokPool
from detok.tokenizer.base import Tokenizer
from scheduler_stub.process import PoolEndpoints, StubConfig, StubFailed, StubLoaded, StubReady, StubStatus, child_main
from scheduler_stub.stub import StepPolicy

log = logging.getLogger("detok.serve")

_STUB_STOP_TIMEOUT_S = 5.0


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
    start_timeout_s: float = 120.0


class Stack:
    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg
        self.pool: DetokPool | None = None
        self.tokenizer: Tokenizer | None = None
        self.requests_endpoint = ""
        self.receiver_endpoint = ""
        self._stub: BaseProcess | None = None
        self._stub_conn: Connection | None = None
        self._closed = False
        self.scheduler_generation = 1  # stand-in: B's Stack counts stub restarts here

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
            )
        except Exception as e:
            raise StackStartError(str(e)) from None
        self.requests_endpoint = self.pool.receiver_endpoint("scheduler")
        self.receiver_endpoint = self.pool.receiver_endpoint("frontend")
        self._expect_stub(StubLoaded, deadline)
        assert self._stub_conn is not None
        self._stub_conn.send_bytes(
            msgspec.json.encode(PoolEndpoints(self.pool.endpoints, self.pool.notify_endpoint, self.requests_endpoint))
        )
        self._expect_stub(StubReady, deadline)
        loader.join(max(0.0, deadline - time.monotonic()))
        result = loaded.get("tokenizer")
        if isinstance(result, BaseException) or result is None:
            raise StackStartError(f"the frontend could not load the tokenizer: {result or 'timed out'}")
        self.tokenizer = result

    def _load_tokenizer(self, out: dict[str, Tokenizer | BaseException]) -> None:
        from detok.tokenizer.factory import load_tokenizer

        try:
            out["tokenizer"] = load_tokenizer(self.cfg.tokenizer, chat_template=self.cfg.chat_template)
        except BaseException as e:  # reported by start(), on the main thread
            out["tokenizer"] = e

    def _spawn_stub(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        cfg = StubConfig(
            tokenizer=self.cfg.tokenizer,
            workload=self.cfg.workload,
            policy=self.cfg.policy,
            log_level=self.cfg.log_level,
            parent_pid=os.getpid(),
        )
        self._stub = ctx.Process(target=child_main, args=(cfg, child_conn), name="detok-scheduler-stub", daemon=True)
        self._stub.start()
        child_conn.close()
        self._stub_conn = parent_conn

    def _expect_stub(self, kind: type, deadline: float) -> None:
        assert self._stub is not None and self._stub_conn is not None
        decoder = msgspec.json.Decoder(StubStatus)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StackStartError(f"the scheduler stub did not start within {self.cfg.start_timeout_s:g} s")
            if self._stub_conn.poll(min(left, 0.2)):
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

    # ---- running --------------------------------------------------------------------------------
    @property
    def stub_pid(self) -> int | None:
        return None if self._stub is None else self._stub.pid

    def pids(self) -> list[int]:
        """Every child process of the stack (workers, spare, stub)."""
        pids = self.pool.all_pids() if self.pool is not None else []
        if self._stub is not None and self._stub.pid:
            pids.append(self._stub.pid)
        return pids

    def health(self) -> dict[str, bool]:
        pool_up = self.pool is not None and not self.pool.closed and all(s.serving for s in self.pool.slots())
        stub_up = self._stub is not None and self._stub.exitcode is None
        return {"pool": pool_up, "scheduler": stub_up}

    def health_detail(self) -> dict[str, object]:
        """Stand-in for B's: each worker slot's state and the scheduler's."""
        slots = self.pool.slots() if self.pool is not None and not self.pool.closed else []
        workers = ["serving" if s.serving else "restarting" for s in slots]
        return {"workers": workers, "scheduler": "serving" if self.health()["scheduler"] else "down"}

    # ---- stop -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the stub (SIGTERM, bounded wait, SIGKILL), then the pool. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._stub_conn is not None:
            self._stub_conn.close()  # the stub's parent-pipe watch stops its loop too
        if self._stub is not None:
            if self._stub.exitcode is None:
                self._stub.terminate()
                self._stub.join(_STUB_STOP_TIMEOUT_S)
            if self._stub.exitcode is None:
                log.warning("the scheduler stub did not stop within %g s; killing it", _STUB_STOP_TIMEOUT_S)
                self._stub.kill()
                self._stub.join(1.0)
        if self.pool is not None:
            self.pool.close()
