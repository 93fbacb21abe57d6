"""The frontend's messages to the scheduler, sent in one run per event-loop turn (`Outbox`).

A zmq send on its own is dear: libzmq hands the message to its I/O thread through a mailbox, which
wakes that thread, which writes the socket and sleeps again; the scheduler wakes once per message
too. Sent in runs, that cost is paid once per run, so a message in a run costs the sending thread a
fraction of a lone send. Requests reach a frontend in waves (a closed-loop client's users finish in
the same scheduler step; an agent's calls go out together), one handler after another in one turn
of the loop. So what the handlers of a turn send is queued and goes out in one run as the turn ends
(`loop.call_soon`), in the order it was put: a request is always sent before its abort.

A full scheduler queue still refuses requests at once (503): once a send found it full, each
request asks the socket whether it takes one now (zmq's POLLOUT, asked only then) until
it does again. The request whose run found the queue full (with its bound, `SchedulerLink`'s hwm
of 100,000, the rare case) has its stream end with the same message as an error (`on_unsent`):
nothing is lost silently. Without a running event loop (a synchronous caller) every message is
sent at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import zmq

log = logging.getLogger("detok.frontend")

# Messages queued in one turn before they are sent without waiting for the turn's end: the run's
# length, and what a turn holds (each a few hundred bytes), stay bounded.
OUTBOX_MAX_QUEUED = 256
# How long the first message of a run may wait for the turn's end: a turn that runs a wave of
# request handlers lasts milliseconds, and a request held that long can miss the
# scheduler's next step. Checked when a message is put: runs of a few messages, each sent within
# about this time of its handler (unless the turn's remaining work holds it, with nothing more put).
OUTBOX_MAX_WAIT_S = 0.001


class Outbox:
    """Sends `put` messages on `sock` at the end of the event-loop turn (see the module)."""

    __slots__ = ("_first_at", "_full", "_loop", "_on_unsent", "_queued", "_sock")

    def __init__(self, sock: zmq.Socket, on_unsent: Callable[[int], None]) -> None:
        self._sock = sock
        self._on_unsent = on_unsent  # a request (by rid) that the scheduler's full queue did not take
        self._queued: list[tuple[bytes, int | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop whose turn-end flush is scheduled
        self._first_at = 0.0  # when the run's first message was queued (time.perf_counter)
        self._full = False  # the last send found the scheduler's queue full

    def can_send(self) -> bool:
        """Whether a message put now will be taken, as far as is known: once a send found the
        scheduler's queue full, the socket is asked (POLLOUT) until it takes messages again."""
        if self._full:
            self._full = not self._sock.get(zmq.EVENTS) & zmq.POLLOUT
        return not self._full

    def put(self, message: bytes, rid: int | None = None) -> bool:
        """Queue `message` (rid: the request it submits, told to `on_unsent` if it cannot be sent;
        None for a best-effort message). Returns False if it was sent at once and not taken
        (no running event loop: a synchronous send)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._send_now(message)
        if self._loop is not loop:
            self.flush()  # (queued on a loop that stopped before its turn ended: out first, in order)
            self._loop = loop
            loop.call_soon(self.flush)
        queued = self._queued
        now = time.perf_counter()
        if not queued:
            self._first_at = now
        queued.append((message, rid))
        if len(queued) >= OUTBOX_MAX_QUEUED or now - self._first_at >= OUTBOX_MAX_WAIT_S:
            self._send_queued()
        return True

    def retract(self, rids: set[int]) -> set[int]:
        """Take back the queued submissions of `rids` (a submission that failed midway: its first
        choices must not reach the scheduler); returns those taken back (the others went out)."""
        kept = [(m, r) for m, r in self._queued if r is None or r not in rids]
        taken = {r for _, r in self._queued if r is not None and r in rids}
        self._queued = kept
        return taken

    def flush(self) -> None:
        """Send what is queued now (the turn's end; `SchedulerLink.close`)."""
        self._loop = None
        self._send_queued()

    def _send_queued(self) -> None:
        queued, self._queued = self._queued, []
        unsent = 0
        for message, rid in queued:
            if not self._send_now(message):
                unsent += 1
                if rid is not None:
                    try:
                        self._on_unsent(rid)
                    except Exception:  # (its loop closed under a last flush: the request is gone anyway)
                        log.exception("rid %d: telling its stream it was not sent failed", rid)
        if unsent:
            log.warning("the scheduler's queue is full: %d of %d messages not sent", unsent, len(queued))

    def _send_now(self, message: bytes) -> bool:
        try:
            self._sock.send(message, zmq.NOBLOCK)
        except zmq.Again:
            self._full = True
            return False
        self._full = False
        return True
