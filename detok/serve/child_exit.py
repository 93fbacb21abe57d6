"""Whether a child process has ended, asked from any thread without reaping it.

`Process.exitcode`, `is_alive()` and `join()` reap the child with `waitpid`. When two threads do
that at once, the one that loses the race gets ECHILD, and CPython's `Popen.poll` then reports
the child as still running. `detok serve` asks about its children from several threads: the
health board publishes their state while the main thread stops them. So one thread owns the
reaping of each child (the one that starts, restarts and stops it), and every other question is
asked of the process's sentinel: a file descriptor that becomes readable once the process has
exited, and stays readable after it is reaped.
"""

from __future__ import annotations

import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess


def has_exited(process: BaseProcess) -> bool:
    """The started `process` has ended (it may not be reaped yet). Never reaps it."""
    return bool(wait([process.sentinel], 0))


def wait_for_exit(processes: list[BaseProcess], deadline: float) -> list[BaseProcess]:
    """Wait until every one of `processes` has ended or `time.monotonic()` passes `deadline`;
    returns those still running. Never reaps them (their owner joins them after)."""
    running = {p.sentinel: p for p in processes}
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for ended in wait(list(running), left):
            del running[ended]  # type: ignore[arg-type]
    return list(running.values())
