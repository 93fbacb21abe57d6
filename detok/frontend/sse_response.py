"""A streamed (SSE) response as a plain ASGI callable: the per-chunk path is one `send` to the
server, nothing else.

Starlette's StreamingResponse costs, per chunk, the send wrappers of every middleware layer
(ServerErrorMiddleware, ExceptionMiddleware, ...: ~10% of the frontend's CPU at 512 streams, by
py-spy) and, per response, an anyio task group. Here the response start goes through the wrapped
`send` (the middleware must know a response started), the body chunks through the server's own
`send`, which `detok.frontend.app` puts in the scope as `RAW_SEND`. A client that goes away is
seen by one watcher task per response waiting on `receive()`; it cancels the streaming and the
request is released (its unfinished choices aborted) however the stream ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from detok.frontend import sse

if TYPE_CHECKING:
    from detok.frontend.responses import ResponseContext

RAW_SEND = "detok.raw_send"
FRONTEND_HEADER = "x-detok-frontend"  # which frontend process serves the stream (`--frontends N`)
_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")] + [
    (k.lower().encode(), v.encode()) for k, v in sse.HEADERS.items()
]


class SseResponse(Response):
    """A Response to FastAPI (it returns Responses as they are), its own ASGI callable to the server."""

    def __init__(self, body: AsyncIterator[bytes], release: Callable[..., object], ctx: ResponseContext,
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
            await send({"type": "http.response.start", "status": 200, "headers": self._headers})
            async with contextlib.aclosing(self._body) as chunks:
                async for chunk in chunks:
                    await raw_send({"type": "http.response.body", "body": chunk, "more_body": True})
            await raw_send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # our own cancellation: the client went away, nothing to propagate
        except OSError:
            pass  # the client went away mid-write
        finally:
            watcher.cancel()
            self._release(client_gone=not self._ctx.completed)
