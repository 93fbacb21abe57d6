"""`detok serve --frontends N`: N HTTP frontend processes over one listening socket, supervised.

    detok serve (supervisor: pool supervisor, stub watcher, this, the health board)
     ├── frontend 0 … N-1    uvicorn + the OpenAI app, each its own DeltaReceiver and rid space
     ├── detok worker 0 … W-1 (+ spare)
     └── scheduler stub

The listening socket is made once, here, and inherited by every frontend: the kernel hands each
new connection to one of the processes waiting in accept, and nothing queued in its backlog is
lost when a frontend dies. A frontend that dies is started again (same index, next generation,
so its rids never meet its predecessor's; backoff as the stub's); its open connections die with
it (its clients see the connection end without `[DONE]`), the other frontends' streams go on.
Its requests are aborted in the scheduler first (`on_death`: one AbortRange over its rid space,
see scheduler_link.RangeAborter), so they stop generating and the workers free them.
Stopping: SIGTERM to every frontend (each drains, see detok.serve.shutdown), a bounded wait,
then SIGKILL for any left.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Final

from detok.serve.child_exit import has_exited, wait_for_exit
from detok.serve.frontend_process import FrontendSpec, frontend_main

log = logging.getLogger("detok.serve")

RESTART_BACKOFF_S: Final = (0.0, 0.5, 1.0, 2.0, 5.0)  # before the n-th consecutive quick restart
_STABLE_S: Final = 30.0
_POLL_S: Final = 0.1
_STOP_MARGIN_S: Final = 10.0  # past the drain time, before SIGKILL


class FrontendStartError(RuntimeError):
    pass


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.process: BaseProcess | None = None
        self.ready: Connection | None = None
        self.state = "starting"
        self.restarts = 0
        self.up_since = 0.0
        self.quick_deaths = 0


class FrontendSupervisor:
    def __init__(self, count: int, make_spec: Callable[[int, int], FrontendSpec], listener: socket.socket,
                 drain_s: float, metrics_dir: str | None = None,
                 on_death: Callable[[int, int], object] | None = None) -> None:
        """`on_death(index, generation)`: called (in the watcher thread) when a frontend process
        is seen dead, before it is started again."""
        self._make_spec = make_spec
        self._on_death = on_death
        self._listener = listener
        self._drain_s = drain_s
        self._metrics_dir = metrics_dir
        self._slots = [_Slot(i) for i in range(count)]
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    # ---- start ----------------------------------------------------------------------------------
    def start(self, timeout_s: float) -> None:
        """Start every frontend; return once all serve."""
        for slot in self._slots:
            self._spawn(slot)
        deadline = time.monotonic() + timeout_s
        for slot in self._slots:
            self._await_ready(slot, deadline)
        self._watcher = threading.Thread(target=self._watch, name="detok-frontends-watch", daemon=True)
        self._watcher.start()

    def _spawn(self, slot: _Slot) -> None:
        receive, send = self._ctx.Pipe(duplex=False)
        spec = self._make_spec(slot.index, slot.generation)
        process = self._ctx.Process(target=frontend_main, args=(spec, self._listener, send),
                                    name=f"detok-frontend-{slot.index}", daemon=True)
        with self._lock:
            if self._stopping.is_set():
                receive.close()
                send.close()
                return
            process.start()
            slot.process, slot.ready, slot.state = process, receive, "starting"
        send.close()

    def _await_ready(self, slot: _Slot, deadline: float) -> None:
        assert slot.process is not None and slot.ready is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FrontendStartError(f"frontend {slot.index} did not start in time")
            if self._stopping.is_set():
                raise FrontendStartError("the stack is closing")
            if slot.ready.poll(min(left, _POLL_S)):
                try:
                    slot.ready.recv_bytes()
                except EOFError:
                    raise FrontendStartError(
                        f"frontend {slot.index} exited with code {slot.process.exitcode} while starting") from None
                with self._lock:
                    slot.state, slot.up_since = "up", time.monotonic()
                return
            if not slot.process.is_alive():
                raise FrontendStartError(f"frontend {slot.index} exited with code {slot.process.exitcode} while starting")

    # ---- supervision ----------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stopping.wait(_POLL_S):
            for slot in self._slots:
                process = slot.process
                if process is None or not has_exited(process) or self._stopping.is_set():
                    continue
                process.join(1.0)  # (the sentinel fires as it exits, a moment before it can be reaped)
                self._restart(slot, process)

    def _restart(self, slot: _Slot, dead: BaseProcess) -> None:
        log.error("frontend %d (pid %s) exited with code %s; restarting it", slot.index, dead.pid, dead.exitcode)
        if self._metrics_dir is not None and dead.pid is not None:
            from detok.metrics import mark_process_dead

            mark_process_dead(dead.pid, self._metrics_dir)
        from detok.wire.owned_dirs import remove_orphans

        remove_orphans()  # its receiver's ipc directory (its lock died with it): restarts leave no trail
        if self._on_death is not None:
            try:
                self._on_death(slot.index, slot.generation)
            except Exception:  # noqa: BLE001 - the restart must happen whatever this does
                log.exception("frontend %d: aborting its requests failed", slot.index)
        quick = time.monotonic() - slot.up_since < _STABLE_S
        slot.quick_deaths = slot.quick_deaths + 1 if quick else 0
        with self._lock:
            slot.state = "restarting"
        if slot.ready is not None:
            slot.ready.close()
        delay = RESTART_BACKOFF_S[min(slot.quick_deaths, len(RESTART_BACKOFF_S)) - 1] if slot.quick_deaths else 0.0
        if self._stopping.wait(delay):
            return
        slot.generation += 1
        slot.restarts += 1
        try:
            self._spawn(slot)
            self._await_ready(slot, time.monotonic() + 120.0)
        except FrontendStartError as e:
            log.error("frontend %d did not come back: %s", slot.index, e)
            if slot.process is not None and slot.process.exitcode is None:
                slot.process.kill()
                slot.process.join(1.0)
            slot.up_since = time.monotonic()
            return
        log.warning("frontend %d is back (pid %s, generation %d)", slot.index, slot.process.pid if slot.process else None,
                    slot.generation)

    # ---- state ----------------------------------------------------------------------------------
    def status(self) -> list[dict[str, object]]:
        with self._lock:
            return [{"index": s.index, "state": s.state if s.process is None or not has_exited(s.process)
                     else "restarting", "pid": s.process.pid if s.process else None, "generation": s.generation,
                     "restarts": s.restarts} for s in self._slots]

    def all_up(self) -> bool:
        return all(s["state"] == "up" for s in self.status())

    def pids(self) -> list[int]:
        return [s.process.pid for s in self._slots if s.process is not None and s.process.pid is not None
                and not has_exited(s.process)]

    # ---- stop -----------------------------------------------------------------------------------
    def stop(self) -> None:
        """SIGTERM every frontend (each drains its open requests), wait, SIGKILL what is left."""
        with self._lock:
            self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(5.0)
        live = [s.process for s in self._slots if s.process is not None and not has_exited(s.process)]
        for process in live:
            if process.pid is not None:
                try:
                    os.kill(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        # (by the sentinels: the health board asks for the frontends' state meanwhile, see child_exit)
        for process in wait_for_exit(live, time.monotonic() + self._drain_s + _STOP_MARGIN_S):
            log.warning("frontend pid %s did not stop in time; killing it", process.pid)
            process.kill()
        for process in live:
            process.join(2.0)
        for slot in self._slots:
            if slot.ready is not None:
                slot.ready.close()
