"""One request's delta stream at the frontend (`RequestStream`, made by `DeltaReceiver.open`) and
what it yields (`RequestDelta`): text de-duplicated by char offset, logprob entries by token index,
the first finish kept."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from detok.parsing.types import ToolCallDelta
from detok.receiver.stream_fields import StreamFields
from detok.receiver.token_logprobs import TokenLogprobs
from detok.receiver.typed import TypedState
from detok.wire.params import Finish

if TYPE_CHECKING:
    from detok.wire.to_frontends import TypedRow

log = logging.getLogger("detok.receiver")


class RequestDelta(NamedTuple):
    """New text of one request; `finish` is set on the last. `num_tokens`: the request's output
    tokens so far (the running count the workers report; the final count on the last delta).
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


Pusher = Callable[["RequestStream"], bool]


class PushQueue:
    """A receiver's streams whose new deltas go to their pushers (`RequestStream.push_to`): run
    once per event-loop turn, after the batches of that turn are applied (so a stream's text,
    logprob entries and token count of one batch arrive together)."""

    __slots__ = ("_streams", "_scheduled")

    def __init__(self) -> None:
        self._streams: list[RequestStream] = []
        self._scheduled = False

    def add(self, stream: RequestStream, loop: asyncio.AbstractEventLoop) -> None:
        self._streams.append(stream)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        streams, self._streams = self._streams, []
        for stream in streams:
            try:
                stream._push()
            except Exception:  # (a bug here must not leave the other streams' consumers asleep)
                log.exception("rid %d: a chunk push failed", stream.rid)
                stream._push_queued = False
                waiter = stream._waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)


class StreamOwner(Protocol):
    """What a stream reports to and is removed from: its receiver (`DeltaReceiver`)."""

    gaps: int  # text deltas that arrived at an unexpected char offset
    logprob_gaps: int  # logprob entries that arrived at an unexpected token index
    pushes: PushQueue
    _streams: dict[int, RequestStream]  # the open streams by rid (a finished one leaves it)


class RequestStream(StreamFields):  # type: ignore[misc,valid-type]
    """Async iterator over one request's deltas; ends after the delta carrying the finish. The
    fields a compiled push reads and writes are its base's (`stream_fields.StreamFields`)."""

    __slots__ = ("_done", "_receiver", "calls", "num_tokens", "rid")

    def __init__(self, rid: int, receiver: StreamOwner) -> None:
        self.rid = rid
        self._chunks: list[str] = []
        self._received = 0  # chars received so far: the offset the next delta should have
        self._logprobs: list[TokenLogprobs] = []
        self._next_token = 0  # logprob entries received so far: the token index the next should have
        self._tokens: int | None = None  # output tokens so far, as the workers report them
        self.finish: Finish | None = None
        self.num_tokens: int | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._receiver = receiver
        self._typed: TypedState | None = None  # a parsed request's: created by its first typed row
        self.calls = 0  # tool calls emitted, from the finish
        self._pusher: Pusher | None = None
        self._push_queued = False
        self._push_error: BaseException | None = None

    def _feed_typed(self, row: TypedRow) -> None:
        state = self._typed
        if state is None:
            state = self._typed = TypedState()
        gaps = state.gaps
        if state.feed(row, self._chunks):
            self._wake()
        self._receiver.gaps += state.gaps - gaps

    def _feed_kind(self, kind: int, text: str, offset: int) -> None:
        if not text:
            return
        state = self._typed
        if state is None:
            state = self._typed = TypedState()
        gaps = state.gaps
        if state.feed_kind(kind, text, offset, self._chunks):
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
            if self._pusher is None:
                waiter.set_result(None)
            elif not self._push_queued:
                self._push_queued = True
                self._receiver.pushes.add(self, waiter.get_loop())

    def push_to(self, pusher: Pusher | None) -> None:
        """While this stream's consumer waits in `__anext__`, hand what arrives to
        `pusher(stream)` (once per event-loop turn, in the receiving loop) instead of waking the
        consumer: it may `take()` and deliver the deltas itself (a streamed response writes its
        chunk to the connection: no task switch per chunk). It returns False to wake the consumer
        instead, which then takes them as usual; what it raises, the consumer raises. None: stop."""
        self._pusher = pusher

    def _push(self) -> None:
        self._push_queued = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # its consumer is running (or was cancelled): it takes what is there itself
        pusher = self._pusher
        handled = False
        if pusher is not None:
            try:
                handled = pusher(self)
            except Exception as e:  # noqa: BLE001 - raised again in the consumer, as its own path would
                self._pusher = None
                self._push_error = e
        if not handled:
            waiter.set_result(None)

    def take_text(self) -> str | None:
        """The text that arrived since the last take, where nothing else did (no logprob entries,
        no finish, no typed output; a request's token count is not read). None, with nothing
        taken, otherwise (then `take`)."""
        if self._logprobs or self.finish is not None or self._typed is not None or not self._chunks:
            return None
        chunks = self._chunks
        text = chunks[0] if len(chunks) == 1 else "".join(chunks)
        chunks.clear()
        return text

    def take_items(self) -> tuple[str, list[bytes] | None] | None:
        """The text and the workers' rendered chat logprobs items (None: no entries) that arrived
        since the last take, where nothing else did (no finish, no typed output, every entry
        rendered: `TokenLogprobs.items`). None, with nothing taken, otherwise (then `take`)."""
        runs = self._logprobs
        if self.finish is not None or self._typed is not None or not (self._chunks or runs):
            return None
        items: list[bytes] | None = None
        if runs:
            items = runs[0].items
            if len(runs) > 1 and items is not None:
                items = list(items)
                for run in runs[1:]:
                    if run.items is None:
                        return None
                    items += run.items
            if items is None:
                return None
            self._logprobs = []
        chunks = self._chunks
        text = chunks[0] if len(chunks) == 1 else "".join(chunks)
        chunks.clear()
        return text, items

    @property
    def plain_pending(self) -> bool:
        """What is waiting is text and logprob entries only: no finish, no typed output."""
        return self.finish is None and self._typed is None

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
            streams = self._receiver._streams
            if streams.get(self.rid) is self:  # (not a later request opened with the same rid)
                del streams[self.rid]
            return RequestDelta(text, self.finish, self.num_tokens, logprobs, reasoning, calls, self.calls)
        if typed is not None:
            return RequestDelta(text, None, self._tokens, logprobs, reasoning, calls)
        return RequestDelta(text, None, self._tokens, logprobs)

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
            error = self._push_error
            if error is not None:
                self._push_error = None
                raise error
