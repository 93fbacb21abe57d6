"""The pool supervisor: a thread that starts worker processes, watches them, replaces the dead.

Every worker process first loads the tokenizer and reports `WorkerLoaded`; then the supervisor
assigns it a slot (`AssignSlot`: slot index, endpoint, generation) and it binds and reports
`WorkerReady`. One loaded process is kept as a *spare*: when a slot's process dies (its sentinel
becomes ready), the spare is assigned the slot at once - restart takes milliseconds, not the
seconds a tokenizer load and decode-strategy check take - and a new spare starts loading.

News about slots goes in-band to the scheduler client's notice endpoint as `WorkerEvent`s
("died" with the cause, then "ready"), like vLLM v1's engine-dead message; the client finishes the
dead worker's requests with an error (see detok/scheduler/client.py).

All processes are spawned (not forked: tokenizers' threads) from this thread, so the kernel's
parent-death signal, tied to the spawning thread on Linux, fires exactly when the pool goes away.

Stalls: a serving worker's main loop sends a heartbeat on its pipe every 0.5 s
(`detok.worker.process.HEARTBEAT_INTERVAL_S`). A process holding a slot that shows no sign of life
for `stall_timeout_s` (default `STALL_TIMEOUT_S`) is reported stalled (`slots()`, the
`detok_worker_stalled` gauge) and, unless `replace_stalled=False`, killed with SIGKILL: then the
usual death path runs (the spare takes the slot, the scheduler client gets a WorkerEvent "died"
naming the stall).

Slots and process handles are in `slots.py`, the stall check in `stalls.py`.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from multiprocessing.connection import wait

import zmq

from detok import wire
from detok.metrics import PoolMetrics, mark_process_dead
from detok.pool.slots import (
    PoolStartError,
    PoolStatus,
    Slot,
    SlotInfo,
    WorkerProc,
    exit_cause,
    slot_info,
    stop_processes,
)
from detok.pool.stalls import STALL_TIMEOUT_S, StallWatch
from detok.wire.endpoints import connectable, make_socket, unmapped
from detok.wire.security import SocketSecurity
from detok.worker.process import WorkerConfig, pool_child_main

log = logging.getLogger("detok.pool")

_WAKE_S = 0.5  # the loop also wakes this often to retry spawns held back by the crash backoff
_CRASH_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0)  # delay before the n-th consecutive failed start


class Supervisor(StallWatch):
    def __init__(
        self,
        cfg: WorkerConfig,
        endpoints: list[str],
        *,
        notify_endpoint: str | None,
        spare: bool = True,
        shutdown_timeout_s: float = 5.0,
        stall_timeout_s: float = STALL_TIMEOUT_S,
        replace_stalled: bool = True,
    ) -> None:
        if not stall_timeout_s > 0:
            raise ValueError("stall_timeout_s must be > 0")
        self._cfg = cfg
        self._stall_timeout_s = stall_timeout_s
        self._replace_stalled = replace_stalled
        self._wake_s = min(_WAKE_S, stall_timeout_s / 4)
        self._slots = [Slot(i, e) for i, e in enumerate(endpoints)]
        self._want_spare = spare
        self._notify_endpoint = notify_endpoint
        self._shutdown_timeout_s = shutdown_timeout_s
        self._mp = multiprocessing.get_context("spawn")
        self._procs: list[WorkerProc] = []
        self._lock = threading.Condition()
        self._status = PoolStatus()
        self._closing = False
        self._stop_expected = False  # set by expect_stop: exits are no longer replaced
        self._wake_r, self._wake_w = self._mp.Pipe(duplex=False)
        self._failed_starts = 0
        self._started = False  # every slot served once: later failures are restarts, not start errors
        self._next_spawn_at = 0.0
        self._thread = threading.Thread(target=self._run, name="detok-supervisor", daemon=True)
        self._ctx: zmq.Context | None = None
        self._events: zmq.Socket | None = None
        self._encoder = wire.new_encoder()
        self._decoder = wire.supervisor_inbound_decoder()
        self._security = SocketSecurity(cfg.keys, cfg.insecure)
        self._metrics = PoolMetrics.if_enabled(len(endpoints))

    # ---- control (any thread) -----------------------------------------------------------------
    def start(self, timeout_s: float) -> None:
        """Start all slots; return when every one serves, raise PoolStartError otherwise."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._status.failure and not all(s.proc and s.proc.state == "serving" for s in self._slots):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._status.failure = f"workers not ready after {timeout_s:g} s"
                    break
                self._lock.wait(left)
            failure = self._status.failure
        if failure:
            self.stop()
            raise PoolStartError(f"detok pool failed to start: {failure}")

    def expect_stop(self) -> None:
        """A stop signal reached this process and is about to stop the pool: a worker that exits
        from now on (the signal may have reached the whole process group) is noted, not replaced
        or reported as a failure. Safe in a signal handler: one flag, no lock."""
        self._stop_expected = True

    def stop(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._wake_w.send_bytes(b"x")
        except OSError:
            pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self._shutdown_timeout_s + 5.0)

    def wait_serving(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not all(s.proc and s.proc.state == "serving" for s in self._slots):
                left = deadline - time.monotonic()
                if left <= 0 or self._closing:
                    return False
                self._lock.wait(left)
        return True

    def slots(self) -> list[SlotInfo]:
        with self._lock:
            return [slot_info(s) for s in self._slots]

    def all_pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs if p.pid]

    @property
    def restarts(self) -> int:
        return self._status.restarts

    @property
    def restart_seconds(self) -> list[float]:
        return list(self._status.restart_seconds)

    @property
    def stall_replacements(self) -> int:
        return self._status.stall_replacements

    @property
    def endpoints(self) -> list[str]:
        with self._lock:
            return [s.endpoint for s in self._slots]

    # ---- the supervisor thread ----------------------------------------------------------------
    def _run(self) -> None:
        self._ctx = zmq.Context()
        if self._notify_endpoint:
            self._events = make_socket(self._ctx, zmq.PUSH, hwm=1000)
            self._security.connect(self._events, self._notify_endpoint)
        try:
            self._balance()
            while not self._closing:
                waitables: list[object] = [self._wake_r]
                for p in self._procs:
                    waitables.append(p.process.sentinel)
                    if p.conn is not None:
                        waitables.append(p.conn)
                ready = wait(waitables, timeout=self._wake_s)  # type: ignore[arg-type]
                if self._closing:
                    break
                for p in list(self._procs):
                    if p.conn is not None and p.conn in ready:
                        self._on_message(p)
                for p in list(self._procs):
                    if p.process.sentinel in ready:
                        self._on_exit(p)
                self._check_stalls()
                self._balance()
        except Exception:
            log.exception("detok pool supervisor crashed; stopping the pool")
            with self._lock:
                self._status.failure = "supervisor crashed"
                self._lock.notify_all()
        finally:
            self._terminate_all()
            if self._events is not None:
                self._events.close(linger=100)  # news nobody took by now is dropped, not waited on
            self._security.close()
            self._ctx.term()

    def _on_message(self, p: WorkerProc) -> None:
        assert p.conn is not None
        try:
            msg = self._decoder.decode(p.conn.recv_bytes())
        except (EOFError, OSError):
            p.conn.close()
            p.conn = None  # the process is gone or going: its sentinel tells the rest
            return
        p.last_seen = time.monotonic()
        if p.stalled:
            self._set_stalled(p, False)
            log.warning("worker process %d shows life again after a stall", p.pid)
        if isinstance(msg, wire.WorkerHeartbeat):
            return
        if isinstance(msg, wire.WorkerLoaded):
            log.info("worker process %d loaded the tokenizer in %.2f s (%s)", msg.pid, msg.load_seconds, msg.strategy)
            p.state = "spare"
            self._failed_starts = 0
        elif isinstance(msg, wire.WorkerReady):
            with self._lock:
                slot = self._slots[msg.worker]
                p.state = "serving"
                slot.listening = unmapped(msg.endpoint)
                slot.endpoint = connectable(msg.endpoint)  # a tcp wildcard port is now fixed
                if slot.died_at:
                    self._status.restart_seconds.append(time.monotonic() - slot.died_at)
                    slot.died_at = 0.0
                if all(s.proc and s.proc.state == "serving" for s in self._slots):
                    self._started = True
                self._lock.notify_all()
            log.info("worker %d (pid %d, generation %d) serving %s", slot.index, p.pid, slot.generation, slot.endpoint)
            self._event(wire.WorkerEvent(slot.index, "ready", p.pid, slot.generation))
        else:
            log.error("worker process %d failed to start: %s", msg.pid, msg.error)
            self._failed_starts += 1
            with self._lock:
                if not self._started:
                    self._status.failure = msg.error
                    self._lock.notify_all()

    def _on_exit(self, p: WorkerProc) -> None:
        p.process.join(1.0)  # the sentinel fires as the process exits, a moment before it is reapable
        cause = p.kill_cause or exit_cause(p.process.exitcode)
        if p.stalled:
            self._set_stalled(p, False)
        self._procs.remove(p)
        if p.conn is not None:
            p.conn.close()
        if self._cfg.metrics_dir and p.pid:
            mark_process_dead(p.pid, self._cfg.metrics_dir)
        if self._stop_expected:  # (the pool stops: no replacement, nothing to report but this)
            log.info("worker process %d %s as the pool stops", p.pid, cause)
            if p.slot is not None:
                with self._lock:
                    self._slots[p.slot].proc = None
                    self._lock.notify_all()
            return
        if p.slot is None:
            if p.state == "loading":
                self._failed_starts += 1
            log.warning("spare worker process %d %s", p.pid, cause)
            return
        slot = self._slots[p.slot]
        message = f"detok worker {slot.index} (pid {p.pid}) {cause}"
        log.error("%s; restarting it", message)
        with self._lock:
            slot.proc = None
            slot.cause = message
            slot.died_at = time.monotonic()
            slot.died_wall = time.time()
            if p.state == "serving":
                self._status.restarts += 1
            elif not self._started:
                self._status.failure = message
            self._lock.notify_all()
        self._event(wire.WorkerEvent(slot.index, "died", p.pid, slot.generation, message))

    def _balance(self) -> None:
        """Give every empty slot a loaded spare, and keep enough processes loading."""
        if self._stop_expected:
            return
        spares = [p for p in self._procs if p.state == "spare"]
        for slot in self._slots:
            if slot.proc is None and spares:
                self._assign(slot, spares.pop(0))
        empty = sum(1 for s in self._slots if s.proc is None)
        loading = sum(1 for p in self._procs if p.state == "loading")
        missing = empty + (1 if self._want_spare else 0) - len(spares) - loading
        now = time.monotonic()
        if missing > 0 and now >= self._next_spawn_at:
            for _ in range(missing):
                self._spawn()
            delay = _CRASH_BACKOFF_S[min(self._failed_starts, len(_CRASH_BACKOFF_S) - 1)]
            self._next_spawn_at = now + delay

    def _assign(self, slot: Slot, p: WorkerProc) -> None:
        assert p.conn is not None
        with self._lock:
            slot.generation += 1
            slot.proc = p
            p.slot = slot.index
            p.state = "assigned"
            p.last_seen = time.monotonic()
        msg = wire.AssignSlot(slot.index, slot.endpoint, slot.generation, slot.cause, slot.died_wall)
        try:
            p.conn.send_bytes(self._encoder.encode(msg))
        except OSError:
            pass  # it just died: its sentinel will report it

    def _spawn(self) -> None:
        r, w = self._mp.Pipe(duplex=True)
        process = self._mp.Process(target=pool_child_main, args=(self._cfg, w), name="detok-worker", daemon=True)
        process.start()
        w.close()  # the child's end: keeping it open here would hide the child's death from recv
        with self._lock:
            self._procs.append(WorkerProc(process, r))

    def _event(self, event: wire.WorkerEvent) -> None:
        if self._events is not None:
            try:
                self._events.send(self._encoder.encode(event), zmq.NOBLOCK)
            except zmq.Again:
                log.warning("scheduler notice queue full: worker event dropped: %s", event)

    def _terminate_all(self) -> None:
        stop_processes(list(self._procs), self._encoder.encode(wire.StopWorker()), self._shutdown_timeout_s,
                       self._cfg.metrics_dir)
        with self._lock:
            self._procs.clear()
            for s in self._slots:
                s.proc = None
            self._lock.notify_all()


