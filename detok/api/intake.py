"""Where request bodies are parsed, chat-templated and tokenized: a small pool of threads, off the
event loop.

A body of a few MB costs tens of ms to seconds of work; on the loop it would stall every stream of
the process. In these threads it does not: the tokenizers release the GIL while they encode
(`detok.tokenizer.bounded`), pydantic only ever sees bodies whose lists can be legal
(`detok.api.body_precheck`), and pure-Python work gives the GIL up every switch interval
(5 ms). The pool is small and fixed: many heavy requests at once wait their turn (each waiting
one holds only its body, which the HTTP limits bound) instead of each building its ids at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

from detok.memory import trim_heap

# Requests tokenized at the same time: each may build a prompt's ids and a tokenizer's working
# memory (tens of MB for a 4 MB text), so the bound is what keeps a burst's memory bounded.
MAX_INTAKE_THREADS = 2
# Bodies this large leave freed memory behind (glibc keeps it): the heap is trimmed after them,
# TRIM_DELAY_S later (by then a refused request's body and ids are gone too), once per burst.
TRIM_AFTER_BYTES = 1024 * 1024
TRIM_DELAY_S = 0.5

T = TypeVar("T")


class Intake:
    """A fixed pool of MAX_INTAKE_THREADS threads for the CPU work of a request's intake."""

    def __init__(self, threads: int = MAX_INTAKE_THREADS) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="detok-intake")
        self._trim: asyncio.TimerHandle | None = None
        self.trims = 0

    async def run(self, size: int, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` in the pool; `size` is the body's, for the trim after heavy ones."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        finally:
            if size >= TRIM_AFTER_BYTES and self._trim is None:
                self._trim = loop.call_later(TRIM_DELAY_S, self._start_trim)

    def _start_trim(self) -> None:
        self._trim = None
        self.trims += 1
        self._pool.submit(trim_heap, True)  # a trim holds the allocator's locks a few ms: not on the loop

    def close(self) -> None:
        if self._trim is not None:
            self._trim.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
