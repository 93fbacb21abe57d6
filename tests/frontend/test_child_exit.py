"""Asking whether a child has ended from one thread while another stops it (detok.serve.child_exit).

`Process.exitcode` reaps the child; two threads reaping at once make the loser see the child as
running, and a supervisor stopping its frontends then killed ones that had already stopped and
logged that they "did not stop in time". These tests run real child processes (no tokenizer,
nothing else): a bare `time.sleep` in a spawned interpreter.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time

from detok.serve import frontends as frontends_module
from detok.serve.child_exit import has_exited, wait_for_exit
from detok.serve.frontends import FrontendSupervisor

_CTX = multiprocessing.get_context("spawn")
_DEADLINE_S = 30.0


def _child(seconds: float) -> multiprocessing.process.BaseProcess:
    process = _CTX.Process(target=time.sleep, args=(seconds,), daemon=True)
    process.start()
    return process


def _until_exited(process: multiprocessing.process.BaseProcess) -> None:
    deadline = time.monotonic() + _DEADLINE_S
    while not has_exited(process):
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.01)


def _still_reapable(pid: int) -> bool:
    """Reaps `pid` here: True if nobody had reaped it yet."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False


def test_has_exited_sees_the_end_without_reaping_the_child():
    process = _child(0.0)
    _until_exited(process)
    assert has_exited(process) and has_exited(process)
    assert _still_reapable(process.pid)  # its owner can still join it and read its exit code


def test_a_running_child_has_not_exited_and_wait_for_exit_returns_it_at_the_deadline():
    process = _child(60.0)
    try:
        started = time.monotonic()
        assert not has_exited(process)
        assert wait_for_exit([process], time.monotonic() + 0.2) == [process]
        assert 0.2 <= time.monotonic() - started < 10
    finally:
        process.kill()
        process.join(_DEADLINE_S)


def test_wait_for_exit_returns_once_every_child_ended():
    quick, slower = _child(0.0), _child(0.3)
    assert wait_for_exit([quick, slower], time.monotonic() + _DEADLINE_S) == []
    for process in (quick, slower):
        process.join(_DEADLINE_S)
        assert process.exitcode == 0


_IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def _status(pid: int) -> bytes:
    with open(f"/proc/{pid}/status", "rb") as f:
        return f.read()


def _ignores_sigterm(pid: int) -> bool:
    ignored = next(line for line in _status(pid).splitlines() if line.startswith(b"SigIgn:"))
    return bool(int(ignored.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def _supervisor(processes: list[multiprocessing.process.BaseProcess]) -> FrontendSupervisor:
    """A supervisor over already started children, as if they were its frontends."""
    listener = socket.socket()
    supervisor = FrontendSupervisor(len(processes), lambda index, generation: None, listener, drain_s=0.0)  # type: ignore[arg-type,return-value]
    for slot, process in zip(supervisor._slots, processes):
        slot.process, slot.state = process, "up"
    listener.close()
    return supervisor


def test_the_health_boards_questions_never_reap_a_frontend():
    process = _child(0.0)
    supervisor = _supervisor([process])
    _until_exited(process)
    assert supervisor.status()[0]["state"] == "restarting" and supervisor.pids() == []
    assert not supervisor.all_up()
    assert _still_reapable(process.pid)


def test_stop_takes_a_stopped_frontend_for_stopped_while_the_board_asks_its_state(caplog, monkeypatch):
    # (the board's thread asks as fast as it can: under the old reaping, one of the two threads
    # lost the race and a frontend that had exited was logged and killed as a straggler)
    monkeypatch.setattr(frontends_module, "_STOP_MARGIN_S", 20.0)
    processes = [_child(60.0) for _ in range(3)]
    supervisor = _supervisor(processes)
    asking = threading.Event()
    asking.set()

    def board() -> None:
        while asking.is_set():
            supervisor.status()
            supervisor.pids()

    thread = threading.Thread(target=board, daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger="detok.serve"):
            started = time.monotonic()
            supervisor.stop()
        assert time.monotonic() - started < 10
    finally:
        asking.clear()
        thread.join(_DEADLINE_S)
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
    for process in processes:
        assert process.exitcode == -15  # ended by the SIGTERM, reaped by stop()


def test_stop_kills_a_frontend_that_outlives_the_bound(caplog, monkeypatch):
    monkeypatch.setattr(frontends_module, "_STOP_MARGIN_S", 0.3)
    process = _CTX.Process(target=exec, args=(_IGNORES_SIGTERM,), daemon=True)
    process.start()
    ready = time.monotonic() + _DEADLINE_S  # (its handler is set once it has run a moment: wait for that)
    while b"SigIgn" not in _status(process.pid) or not _ignores_sigterm(process.pid):
        assert time.monotonic() < ready
        time.sleep(0.01)
    supervisor = _supervisor([process])
    with caplog.at_level(logging.WARNING, logger="detok.serve"):
        supervisor.stop()
    assert [r for r in caplog.records if f"frontend pid {process.pid} did not stop in time" in r.getMessage()]
    assert process.exitcode == -9


def test_a_child_stays_exited_after_its_owner_reaped_it():
    process = _child(0.0)
    process.join(_DEADLINE_S)
    assert process.exitcode == 0 and has_exited(process)
