"""`DeltaReceiver`: the frontend side - text deltas from the detok workers, per request.

    receiver = DeltaReceiver()                  # binds a PULL socket; send receiver.endpoint as
    await receiver.start()                      # GenerateRequest.reply_to
    stream = receiver.open(rid)                 # before the request goes to the scheduler
    async for delta in stream:                  # RequestDelta(text, finish, num_tokens, logprobs)
        ...

Two ways to consume:
- per-rid async iterators (`open`): one wake-up per request per received batch at most; a slow
  consumer gets the texts of several batches joined in one delta;
- a bulk callback (`on_batch`): called with every DeltaBatch as it arrives, before per-rid dispatch,
  for consumers that do their own fan-out without per-rid asyncio work.

Replays are de-duplicated by char offset: a delta that starts before what a request already has
is cut, one that would leave a gap is kept and counted (`gaps`). The first finish of a rid wins.
Logprob entries (requests that asked for them) are de-duplicated the same way, by token index.
Without asyncio (benchmarks, tests), `poll_blocking` receives and dispatches on the calling thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Callable
from typing import NamedTuple, Self

import msgspec
import zmq
import zmq.asyncio

from detok import wire
from detok.wire.endpoints import IpcDir, bound_endpoint, connectable, make_socket
from detok.wire.to_frontends import DeltaBatch
from detok.wire.security import CurveKeys, SocketSecurity
from detok.stream.params import Finish
from detok.parsing.types import ToolCallDelta
from detok.receiver.token_logprobs import TokenLogprobs, split_logprobs
from detok.receiver.typed import TypedState
from detok.wire.to_frontends import TypedRow

log = logging.getLogger("detok.receiver")

_DRAIN_MAX = 256  # messages dispatched per wake-up before yielding to the event loop


class RequestDelta(NamedTuple):
    """New text of one request; `finish` and `num_tokens` (output tokens) are set on the last.
    `logprobs`: the entries of the output tokens that arrived since the last delta, if the request
    asked for logprobs (entries may come with no text: a token held as part of a character).
    A request with output parsing: `text` is its content, `reasoning` its reasoning text,
    `tool_calls` its tool-call deltas (a call's first carries id and name), and `calls` (on the
    last delta) how many tool calls the worker emitted."""

    text: str
    finish: Finish | None = None
    num_tokens: int | None = None
    logprobs: TokenLogprobs | None = None
    reasoning: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    calls: int = 0


class RequestStream:
    """Async iterator over one request's deltas; ends after the delta carrying the finish."""

    __slots__ = (
        "_chunks", "_done", "_logprobs", "_next_token", "_received", "_receiver", "_typed", "_waiter", "calls", "finish",
        "num_tokens", "rid",
    )

    def __init__(self, rid: int, receiver: DeltaReceiver) -> None:
        self.rid = rid
        self._chunks: list[str] = []
        self._received = 0  # chars received so far: the offset the next delta should have
        self._logprobs: list[TokenLogprobs] = []
        self._next_token = 0  # logprob entries received so far: the token index the next should have
        self.finish: Finish | None = None
        self.num_tokens: int | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._receiver = receiver
        self._typed: TypedState | None = None  # a parsed request's: created by its first typed row
        self.calls = 0  # tool calls emitted, from the finish

    def _feed_typed(self, row: TypedRow) -> None:
        state = self._typed
        if state is None:
            state = self._typed = TypedState()
        gaps = state.gaps
        if state.feed(row, self._chunks):
            self._wake()
        self._receiver.gaps += state.gaps - gaps

    def _feed(self, text: str, offset: int) -> None:
        if not text:
            return  # an empty row says nothing (its offset is not meaningful)
        if offset != self._received:
            if offset < self._received:  # replayed text: keep only what is new
                text = text[self._received - offset :]
                if not text:
                    return
            else:
                self._receiver.gaps += 1
                log.warning("rid %d: text gap (have %d chars, delta starts at %d)", self.rid, self._received, offset)
                self._received = offset
        self._chunks.append(text)
        self._received += len(text)
        self._wake()

    def _feed_logprobs(self, entries: TokenLogprobs) -> None:
        if entries.end <= self._next_token:
            return  # replayed entries
        if entries.first != self._next_token:
            if entries.first < self._next_token:
                entries = entries.tail(self._next_token)
            else:
                self._receiver.logprob_gaps += 1
                log.warning("rid %d: logprob gap (have %d tokens, entries start at %d)", self.rid, self._next_token, entries.first)
        self._logprobs.append(entries)
        self._next_token = entries.end
        self._wake()

    def _end(self, finish: Finish, num_tokens: int, calls: int = 0) -> None:
        if self.finish is None:
            self.finish = finish
            self.num_tokens = num_tokens
            self.calls = calls
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> RequestDelta | None:
        """What arrived since the last take, or None if nothing did (non-async consumers)."""
        typed = self._typed
        if self._done or not (self._chunks or self.finish is not None or self._logprobs
                              or (typed is not None and typed.pending)):
            return None
        text = "".join(self._chunks)
        self._chunks.clear()
        logprobs = None
        if self._logprobs:
            logprobs = TokenLogprobs.concat(self._logprobs)
            self._logprobs = []
        reasoning, calls = typed.take() if typed is not None else ("", ())
        if self.finish is not None:
            self._done = True
            self._receiver._streams.pop(self.rid, None)
            return RequestDelta(text, self.finish, self.num_tokens, logprobs, reasoning, calls, self.calls)
        if typed is not None:
            return RequestDelta(text, None, None, logprobs, reasoning, calls)
        return RequestDelta(text, logprobs=logprobs)

    @property
    def done(self) -> bool:
        return self._done

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestDelta:
        while True:
            delta = self.take()
            if delta is not None:
                return delta
            if self._done:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class DeltaReceiver:
    def __init__(
        self,
        endpoint: str | None = None,
        *,
        on_batch: Callable[[DeltaBatch], None] | None = None,
        hwm: int = 100_000,
        keys: CurveKeys | str | os.PathLike[str] | None = None,
        insecure: bool = False,
    ) -> None:
        """Bind `endpoint` (default: an ipc file in a private temp dir, removed on close). A tcp
        endpoint needs the deployment's CURVE `keys` (workers must hold them to deliver), or an
        explicit `insecure=True` (see detok.wire.security)."""
        self._security = SocketSecurity(keys, insecure)
        if endpoint is not None:
            self._security.check(endpoint)
        self._dir = IpcDir(prefix="detok-rx-") if endpoint is None else None
        if self._dir is not None:  # removed at close, or at interpreter exit if never closed
            self._dir_finalizer = weakref.finalize(self, self._dir.remove)
        self._ctx = zmq.asyncio.Context()
        self._sock: zmq.asyncio.Socket = make_socket(self._ctx, zmq.PULL, hwm=hwm)  # type: ignore[assignment]
        try:
            self._security.bind(self._sock, endpoint or self._dir.endpoint("deltas"))  # type: ignore[union-attr]
        except zmq.ZMQError:
            self.close()
            raise
        self.endpoint = connectable(bound_endpoint(self._sock))
        # A blocking twin of the same socket, for poll_blocking (never used while start() runs).
        self._sync_sock: zmq.Socket = zmq.Socket.shadow(self._sock.underlying)
        self._decoder = wire.frontend_inbound_decoder()
        self._streams: dict[int, RequestStream] = {}
        self.on_batch = on_batch
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.malformed = 0
        self.gaps = 0
        self.logprob_gaps = 0

    # ---- requests -------------------------------------------------------------------------------
    def open(self, rid: int) -> RequestStream:
        """The delta stream of `rid`; open it before the request is submitted."""
        stream = self._streams.get(rid)
        if stream is None:
            stream = self._streams[rid] = RequestStream(rid, self)
        return stream

    def discard(self, rid: int) -> None:
        """Stop tracking a request (its client went away); later deltas for it are dropped."""
        self._streams.pop(rid, None)

    def fail_all(self, message: str) -> int:
        """Finish every open request with reason "error" and `message` (e.g. the scheduler died and
        no delta will ever come); returns how many. Call on the receiving event loop's thread."""
        finish = Finish("error", None, message)
        streams = list(self._streams.values())
        for stream in streams:
            stream._end(finish, stream.num_tokens or 0)
        return len(streams)

    @property
    def open_count(self) -> int:
        return len(self._streams)

    # ---- receiving ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start receiving on the running event loop (uvloop or asyncio)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._receive_forever(), name="detok-delta-receiver")

    async def _receive_forever(self) -> None:
        sock = self._sock
        while True:
            raw = await sock.recv(copy=True)
            self._dispatch_raw(raw)
            for _ in range(_DRAIN_MAX):
                try:
                    raw = await sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._dispatch_raw(raw)

    def poll_blocking(self, timeout: float) -> int:
        """Receive and dispatch on this thread (no event loop): waits up to `timeout` s for the
        first message, then takes what is queued. Returns the number of batches handled."""
        sock = self._sync_sock
        handled = 0
        if not sock.poll(int(timeout * 1000)):
            return 0
        while handled < _DRAIN_MAX:
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._dispatch_raw(raw)
            handled += 1
        return handled

    def _dispatch_raw(self, raw: bytes) -> None:
        try:
            batch = self._decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self.malformed += 1
            log.warning("dropped a malformed delta message (%d bytes): %s", len(raw), e)
            return
        self.dispatch(batch)

    def dispatch(self, batch: DeltaBatch) -> None:
        """Hand one DeltaBatch to the bulk callback and to the open request streams."""
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(batch)
        streams = self._streams
        if not streams:
            return
        try:
            rows = batch.rows()
            entries = split_logprobs(batch.logprobs) if batch.logprobs is not None else ()
        except ValueError as e:
            self.malformed += 1
            log.warning("dropped a delta message whose columns do not fit together: %s", e)
            return
        get = streams.get
        for rid, text, offset in rows:
            stream = get(rid)
            if stream is not None:
                stream._feed(text, offset)
        for rid, run in entries:
            stream = get(rid)
            if stream is not None:
                stream._feed_logprobs(run)
        if batch.typed:
            for row in batch.typed:
                stream = get(row.rid)
                if stream is not None:
                    stream._feed_typed(row)
        for done in batch.finished:
            stream = get(done.rid)
            if stream is not None:
                stream._end(done.finish, done.num_tokens, done.calls)

    # ---- shutdown -------------------------------------------------------------------------------
    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._sock.close(linger=0)
        self._security.close()
        self._ctx.term()
        if self._dir is not None:
            self._dir_finalizer()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
