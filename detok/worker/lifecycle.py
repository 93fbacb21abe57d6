"""A worker process's life: die with the parent, stop on SIGTERM.

Children must never outlive the pool: on Linux the kernel sends SIGTERM when the parent dies
(`PR_SET_PDEATHSIG`; note it fires when the *thread* that forked exits, which is why the pool
spawns every worker from its long-lived supervisor thread). Elsewhere, and as a fallback, a
thread blocks on the supervisor pipe: a `StopWorker` on it is an orderly close, its end-of-file
without one means the parent is gone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection

log = logging.getLogger("detok.worker")

_PR_SET_PDEATHSIG = 1


class StopFlag:
    """Set by SIGTERM (and SIGINT when standalone) or by the parent going away; polled by the loop."""

    def __init__(self) -> None:
        self.reason = ""

    def set(self, reason: str) -> None:
        if not self.reason:
            self.reason = reason

    def __bool__(self) -> bool:
        return bool(self.reason)


def install_signal_handlers(stop: StopFlag, *, handle_sigint: bool) -> None:
    def on_signal(signum: int, _frame: object) -> None:
        stop.set(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    # Under a pool, Ctrl-C reaches the whole process group: the parent decides, workers ignore it.
    signal.signal(signal.SIGINT, on_signal if handle_sigint else signal.SIG_IGN)


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGTERM when the parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
                log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        except OSError as e:  # no libc to load: the pipe watch below still covers it
            log.warning("prctl unavailable: %s", e)
    if os.getppid() != parent_pid:  # died before prctl took effect
        os._exit(0)


class PipeWatch:
    """Watches the supervisor pipe once the worker serves: a `StopWorker` is an orderly close; the
    pipe closing without one means the pool process is gone."""

    def __init__(self, conn: Connection, stop: StopFlag) -> None:
        self.pool_closing = False
        self.parent_gone = False
        self._conn = conn
        self._stop = stop
        self.thread = threading.Thread(target=self._watch, name="detok-parent-watch", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        from detok.wire.supervision import StopWorker, supervisor_command_decoder

        decoder = supervisor_command_decoder()
        try:
            while True:
                command = decoder.decode(self._conn.recv_bytes())
                if isinstance(command, StopWorker):
                    self.pool_closing = True
                    self._stop.set(command.reason)
                    return
        except (EOFError, OSError):
            self.parent_gone = True
            self._stop.set("the pool process is gone")
        except Exception as e:  # noqa: BLE001 - a garbled pipe must not leave the worker unsupervised
            log.error("bad message on the supervisor pipe: %s", e)
            self.parent_gone = True
            self._stop.set("supervisor pipe broken")

    def wait_verdict(self, timeout: float) -> None:
        """Wait (bounded) until the pipe said whether the pool is closing or gone."""
        self.thread.join(timeout)


def watch_parent_pipe(conn: Connection, stop: StopFlag) -> PipeWatch:
    """Start watching the supervisor pipe (see PipeWatch)."""
    return PipeWatch(conn, stop)


def orphaned(parent_pid: int) -> bool:
    return os.getppid() != parent_pid
