"""A streamed (SSE) response as a plain ASGI callable: the per-chunk path is one `send` to the
server, nothing else.

Starlette's StreamingResponse costs, per chunk, the send wrappers of every middleware layer
(ServerErrorMiddleware, ExceptionMiddleware, ...: ~10% of the frontend's CPU at 512 streams, by
py-spy) and, per response, an anyio task group. Here the response start goes through the wrapped
`send` (the middleware must know a response started), the body chunks through the server's own
`send`, which `detok.api.app` puts in the scope as `RAW_SEND`; under uvicorn's httptools
protocol, straight to the connection's transport with uvicorn's own framing and flow control
(`_uvicorn_cycle`). A client that goes away is
seen by one watcher task per response waiting on `receive()`; it cancels the streaming and the
request is released (its unfinished choices aborted) however the stream ended. While the body
streams there, its `DirectWriter` is also the response context's `direct`: the receiving loop's
chunk pusher (`detok.streaming.chunk_push`) writes plain chunks with it, in between the body's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from detok.streaming import sse

if TYPE_CHECKING:
    from detok.streaming.response_view import StreamedResponse

RAW_SEND = "detok.raw_send"
FRONTEND_HEADER = "x-detok-frontend"  # which frontend process serves the stream (`--frontends N`)
_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")] + [
    (k.lower().encode(), v.encode()) for k, v in sse.HEADERS.items()
]


class SseResponse(Response):
    """A Response to FastAPI (it returns Responses as they are), its own ASGI callable to the server."""

    def __init__(self, body: AsyncIterator[bytes], release: Callable[..., object], ctx: StreamedResponse,
                 frontend_index: int | None = None) -> None:
        self._body = body
        self._headers = _HEADERS if frontend_index is None else [
            *_HEADERS, (FRONTEND_HEADER.encode(), str(frontend_index).encode())]
        self._release = release
        self._ctx = ctx
        self.status_code = 200  # for middleware and logs that look
        self.background = None
        self.body = b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_send: Send = scope.get(RAW_SEND, send)
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            if not self._ctx.completed:  # the client left mid-stream (not the end of a finished one)
                gone = True
                task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            last = b""
            async with contextlib.aclosing(self._body) as chunks:
                # chat's role chunk (and an echo) is there at once: it goes out with the head
                opening = await anext(chunks, b"") if self._ctx.opens_at_once else b""
                await _start(send, raw_send, scope, self._headers, opening)
                cycle = _uvicorn_cycle(raw_send, scope)
                if cycle is None:
                    async for chunk in chunks:
                        if chunk.endswith(sse.DONE):
                            last = chunk
                            break
                        await raw_send({"type": "http.response.body", "body": chunk, "more_body": True})
                else:
                    writer = DirectWriter(cycle)
                    self._ctx.direct = writer  # (the receiving loop's chunk pusher writes with it too)
                    try:
                        last = await _write_chunked(writer, chunks)
                    finally:
                        self._ctx.direct = None
            # the response's last chunk (it ends with [DONE]) and the body's end: one write
            await raw_send({"type": "http.response.body", "body": last, "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # our own cancellation: the client went away, nothing to propagate
        except OSError:
            pass  # the client went away mid-write
        finally:
            watcher.cancel()
            self._release(client_gone=not self._ctx.completed)


async def _start(send: Send, raw_send: Send, scope: Scope, headers: list[tuple[bytes, bytes]], opening: bytes) -> None:
    """The response's start and its first body chunk (`opening`, if any). Under uvicorn's httptools
    protocol, with nothing between the app and the server's `send`, both go out in one write:
    uvicorn's `send` builds the head as always and writes it to a stand-in transport, whose bytes
    then go to the connection with the chunk framed as uvicorn frames it (one syscall and one
    wake-up of the client fewer per response)."""
    start = {"type": "http.response.start", "status": 200, "headers": headers}
    cycle = _head_cycle(send, raw_send, scope) if opening else None
    if cycle is None:
        await send(start)
        if opening:
            await raw_send({"type": "http.response.body", "body": opening, "more_body": True})
        return
    transport = cycle.transport
    head = _HeadCapture(transport)
    cycle.transport = head  # (send's start does not wait: the writes are not paused, checked above)
    try:
        await send(start)
    finally:
        cycle.transport = transport
    if cycle.chunked_encoding is True:
        transport.write(b"%b%x\r\n%b\r\n" % (b"".join(head.parts), len(opening), opening))
    else:  # (not chunked: uvicorn frames the body its own way)
        if head.parts:
            transport.write(b"".join(head.parts))
        await raw_send({"type": "http.response.body", "body": opening, "more_body": True})


def _head_cycle(send: Send, raw_send: Send, scope: Scope) -> Any:
    """uvicorn's (httptools) request cycle where its head can be captured: `send` is the server's
    own, the response not started, writes not paused (uvicorn's start then never waits)."""
    cycle = _httptools_cycle(raw_send, scope) if send == raw_send else None
    if cycle is None or cycle.response_started or cycle.disconnected or cycle.flow.write_paused:
        return None
    return cycle


def _httptools_cycle(raw_send: Send, scope: Scope) -> Any:
    """uvicorn's httptools request cycle behind `raw_send`, with the state this module reads of it
    (not for a HEAD request), else None."""
    cycle = getattr(raw_send, "__self__", None)
    if type(cycle).__name__ != "RequestResponseCycle" or scope.get("method") == "HEAD":
        return None
    if not all(hasattr(cycle, a) for a in ("flow", "transport", "disconnected", "chunked_encoding", "response_started")):
        return None
    return cycle


class _HeadCapture:
    """The connection's transport while uvicorn writes the head: writes kept, the rest its own."""

    def __init__(self, transport: Any) -> None:
        self.parts: list[bytes] = []
        self._transport = transport

    def write(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _uvicorn_cycle(raw_send: Send, scope: Scope) -> Any:
    """uvicorn's (httptools) request cycle behind `raw_send` when its body is chunked, else None.
    Chunks then go to the connection's transport as uvicorn's `send` would write them (same flow
    control, same framing) without an ASGI message and a coroutine per chunk; any other server,
    HTTP/1.0 or a HEAD request takes the ASGI path."""
    cycle = _httptools_cycle(raw_send, scope)
    return cycle if cycle is not None and cycle.chunked_encoding is True and cycle.response_started else None


class DirectWriter:
    """A chunked body's chunks to the connection's transport, as uvicorn's `send` frames them."""

    __slots__ = ("_cycle", "_flow", "_write")

    def __init__(self, cycle: Any) -> None:
        self._cycle, self._flow, self._write = cycle, cycle.flow, cycle.transport.write

    def ready(self) -> bool:
        """A chunk written now reaches a client that is there and reads (writes not paused)."""
        return not (self._flow.write_paused or self._cycle.disconnected)

    def write(self, chunk: bytes) -> None:
        self._write(b"%x\r\n%b\r\n" % (len(chunk), chunk))

    def parts(self) -> tuple[Any, Any, Callable[[bytes], object]]:
        """(flow, cycle, the transport's write): what `ready` reads and `write` calls, for a
        compiled pusher that does both itself (`detok.streaming.chunk_push`)."""
        return self._flow, self._cycle, self._write


async def _write_chunked(writer: DirectWriter, chunks: AsyncIterator[bytes]) -> bytes:
    """Writes the chunks up to the last one (the one ending with [DONE], the body's last): returns it."""
    cycle, flow, write = writer._cycle, writer._flow, writer._write
    async for chunk in chunks:
        if chunk.endswith(sse.DONE):  # (a text chunk cannot: its text is JSON-escaped in one data line)
            return chunk
        if flow.write_paused and not cycle.disconnected:
            await flow.drain()  # the client reads slowly: wait (meanwhile its deltas join)
        if not cycle.disconnected:  # a client gone: the watcher ends the stream
            write(b"%x\r\n%b\r\n" % (len(chunk), chunk))  # (DirectWriter.write, inline: once per chunk)
    return b""
