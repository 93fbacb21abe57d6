"""A streamed response's chunks written by the receiving loop itself (`RequestStream.push_to`).

The consumer path per chunk is: the receiver wakes the request's task, which resumes through
`SseResponse` -> `stream_events` -> `merged_deltas` -> `RequestStream.__anext__`, takes the
deltas, renders the chunk and writes it (a future, a task step and three async-generator
resumptions per chunk). While a one-choice response's consumer waits with everything it yielded
written, a `ChunkPusher` does the same work for a plain delta (text and logprob entries, no
finish, no typed output) in the receiving loop's turn: take, render (`plain_chunk`, the code the
consumer runs for it too), write to the connection. Anything else - the finish, a client that
reads slowly (the transport's writes paused: its deltas wait and go out joined), a gone client,
`stream_interval` > 1, several choices, typed output - stays the consumer's, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from detok.receiver.request_stream import RequestStream
from detok.streaming.chunks import ChunkRenderer

try:  # the text-only chunk in one C call (optional: without it, ChunkPusher does it in Python)
    from detok._native._chunkpush import TextPusher as _TextPusher
    from detok._native._chunkpush import push_rows as direct_rows  # (DeltaReceiver.direct_rows)
except ImportError:  # pragma: no cover - a build without its C extensions
    _TextPusher = None
    direct_rows = None

if TYPE_CHECKING:
    from detok.streaming.response_view import StreamedChoice, StreamedResponse
    from detok.receiver.request_stream import RequestDelta


# the compiled pusher's take of a stream's waiting deltas: the stream's own rule, given, not looked up
_take_text, _take_items = RequestStream.take_text, RequestStream.take_items


class ChunkWriter(Protocol):
    """Where a response's body chunks go (`sse_response.DirectWriter` under uvicorn)."""

    def ready(self) -> bool: ...  # a chunk written now goes out in order, to a client that is there

    def write(self, chunk: bytes) -> None: ...


def plain_chunk(ctx: StreamedResponse, render: ChunkRenderer, choice: StreamedChoice, index: int,
                delta: RequestDelta) -> bytes | None:
    """The chunk of a delta without typed output (None: it carries nothing to send), the
    choice's clock and usage advanced as its sending does."""
    logprobs, ids = choice.logprobs(delta), (choice.token_ids(delta) if choice.ids is not None else b"")
    if not (delta.text or logprobs is not None or ids):
        return None
    choice.timer.text()
    return render.text(index, delta.text, logprobs, usage=choice.running_usage(ctx, delta), choice_extra=ids)


class ChunkPusher:
    """`RequestStream.push_to`'s pusher of a one-choice streamed response (see the module)."""

    __slots__ = ("_choice", "_ctx", "_render", "_text_only", "_writer")

    def __init__(self, ctx: StreamedResponse, render: ChunkRenderer, choice: StreamedChoice, writer: ChunkWriter) -> None:
        self._ctx, self._render, self._choice, self._writer = ctx, render, choice, writer
        # no logprobs and no usage per chunk: a chunk is its text alone (plain_chunk's result for it)
        self._text_only = ctx.logprobs is None and not ctx.continuous_usage

    @property
    def text_only(self) -> bool:
        return self._text_only

    def __call__(self, stream: RequestStream) -> bool:
        if not self._writer.ready():
            return False  # the consumer's: a paused or gone client
        if self._text_only:
            text = stream.take_text()  # (None: nothing, or not text alone: checked below)
            if text is not None:
                self._choice.timer.text()
                self._writer.write(self._render.text(0, text))
                return True
        if not stream.plain_pending:
            return False  # the consumer's: the finish, typed output
        delta = stream.take()
        if delta is not None:
            chunk = plain_chunk(self._ctx, self._render, self._choice, 0, delta)
            if chunk is not None:
                self._writer.write(chunk)
        return True


def pusher_for(ctx: StreamedResponse, render: ChunkRenderer, choices: Sequence[StreamedChoice],
               streams: Sequence[RequestStream]) -> Callable[[RequestStream], bool] | None:
    """A pusher where the response can have one: written straight to its connection
    (`ctx.direct`), one choice, every delta its own chunk, plain text. Without logprobs or
    per-chunk usage, on uvicorn's connection (`DirectWriter.parts`), the compiled `TextPusher`
    (`_chunkpush.c`): the same chunks as ChunkPusher's text-only branch, which it calls for
    anything but text alone. A parsed chat choice without logprobs or per-chunk usage gets a typed
    compiled pusher, which only the receiver's pass (`_directrows.c`) writes with: its reasoning,
    content and tool-call argument rows, as `TypedChoice.chunks` renders a delta of one of them
    (the choice's `sent_args` kept); everything else (a call's header, the finish) stays the
    consumer's (ChunkPusher declines typed output)."""
    typed = choices[0].typed
    if ctx.direct is None or len(streams) != 1 or ctx.stream_interval > 1 or ctx.return_token_ids:
        return None
    pusher = ChunkPusher(ctx, render, choices[0], ctx.direct)
    parts: Callable[[], tuple[Any, Any, Callable[[bytes], object]]] | None = getattr(ctx.direct, "parts", None)
    if typed is not None:
        if _TextPusher is None or not pusher.text_only or parts is None or ctx.kind != "chat":
            return None
        flow, cycle, write = parts()
        prefix, suffix = render.text_frame(0)
        shown = render.field_prefix(0, typed.field) if typed.include_reasoning else None
        return _TextPusher(pusher, flow, cycle, write, choices[0].timer.text, prefix, suffix, take=_take_text,
                           typed=True, reasoning=shown,
                           sent_args=typed.sent_args, calls_prefix=render.field_prefix(0, "tool_calls"),
                           parallel=typed.parallel)
    # chat logprobs as the workers' rendered items (no per-chunk usage, tokens not named by id):
    # the compiled pusher in its items mode, which leaves any delta of unrendered entries to ChunkPusher
    items = (ctx.kind == "chat" and ctx.logprobs is not None and not ctx.continuous_usage and not ctx.tokens_as_ids)
    if _TextPusher is None or not (pusher.text_only or items) or parts is None:
        return pusher
    flow, cycle, write = parts()
    prefix, suffix = render.text_frame(0)
    if items:
        mid, items_suffix = render.items_frame()
        return _TextPusher(pusher, flow, cycle, write, choices[0].timer.text, prefix, suffix, mid, items_suffix,
                           take=_take_items)
    return _TextPusher(pusher, flow, cycle, write, choices[0].timer.text, prefix, suffix, take=_take_text)


class pushing:  # noqa: N801 - used as a context manager, named as one
    """`async with pushing(streams, pusher)`: `pusher` on the (one) stream while the body streams."""

    __slots__ = ("_pusher", "_streams")

    def __init__(self, streams: Sequence[RequestStream], pusher: Callable[[RequestStream], bool] | None) -> None:
        self._streams, self._pusher = streams, pusher

    async def __aenter__(self) -> None:
        if self._pusher is not None:
            self._streams[0].push_to(self._pusher)

    async def __aexit__(self, *exc: object) -> None:
        if self._pusher is not None:
            self._streams[0].push_to(None)
