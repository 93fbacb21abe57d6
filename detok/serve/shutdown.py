"""Graceful shutdown on SIGINT/SIGTERM, without uvicorn cancelling the responses in flight.

uvicorn's own shutdown waits a while and then cancels the response tasks: a stream is cut with no
error event and no `[DONE]`, and the cancellation prints tracebacks. Instead, the first signal:

1. refuses new requests (503, "the server is shutting down");
2. waits up to `drain_s` for the open requests to finish by themselves;
3. ends the rest through the receiver with an error finish: each streamed response sends its
   OpenAI error event and `[DONE]`, each non-streamed one an error body;
4. then lets uvicorn shut down as usual (its connections are idle by then).

A second signal skips the wait; a third is uvicorn's own force quit.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from detok.api.app import FrontendState

log = logging.getLogger("detok.serve")

SHUTDOWN_MESSAGE = "the server is shutting down"
_POLL_S = 0.02


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: FrontendState, drain_s: float,
                 ignore_sigint: bool = False) -> None:
        super().__init__(config)
        self._ignore_sigint = ignore_sigint  # a frontend child process: its supervisor sends SIGTERM
        self._state = state
        self._drain_s = drain_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        self._skip_wait = False
        # called first on a SIGTERM (from the signal handler): `detok serve` tells its stack a stop
        # is coming, before the drain, so a child the same signal stopped is not restarted
        self.on_sigterm: Callable[[], None] | None = None

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Called from the signal handler: hand over to the event loop."""
        if sig == signal.SIGINT and self._ignore_sigint:
            return
        self._state.draining = True  # now, not at the loop's next turn: the watchdog may poll first
        if sig == signal.SIGTERM and self.on_sigterm is not None:
            self.on_sigterm()
        if self._loop is None or not self.started or self.should_exit:
            super().handle_exit(sig, frame)  # not serving yet, or already stopping: uvicorn's way
            return
        if self._draining is not None:
            self._skip_wait = True  # a second signal: end the open requests now
            return
        self._loop.call_soon_threadsafe(self._begin, sig, frame)

    def _begin(self, sig: int, frame: FrameType | None) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain(sig, frame))

    async def _drain(self, sig: int, frame: FrameType | None) -> None:
        receiver = self._state.link.receiver
        open_now = receiver.open_count
        if open_now:
            print(f"detok serve: {signal.Signals(sig).name}: finishing {open_now} open requests (at most "
                  f"{self._drain_s:g} s) ...", file=sys.stderr, flush=True)
        deadline = asyncio.get_running_loop().time() + self._drain_s
        while receiver.open_count and not self._skip_wait and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(_POLL_S)
        failed = receiver.fail_all(SHUTDOWN_MESSAGE)
        if failed:
            log.warning("shutting down: ended %d open requests with an error", failed)
        await asyncio.sleep(0)  # let the responses take their finish before uvicorn closes connections
        super().handle_exit(sig, frame)
