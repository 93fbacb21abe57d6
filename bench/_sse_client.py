"""A lean HTTP/1.1 client for streamed (SSE) POSTs: one keep-alive connection per simulated user,
each SSE `data:` payload handed to a callback from the connection's `data_received`.

Why not httpx (used elsewhere for plain requests): its per-SSE-chunk client CPU makes the load
generator saturate a core well before the server does; and reusing a connection after a fully read
streamed response stalls some requests for seconds under concurrency.

Why a Protocol and callbacks, not asyncio streams and an async iterator: that form pays two `wait_for`s
(a task and a timer each), a reader wake-up and an async generator step per chunk, so at 1024 users the
client would take more of a 2-core box than the server it measures. Here a chunk costs one
`data_received` call and the parse of its bytes; the timer is per request, and a callback sees the event
as its bytes arrive (its timestamp is not delayed by a task switch).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024  # a response head longer than this is refused (HttpError)
MAX_ERROR_BODY_BYTES = 1 << 20  # a non-streamed (error) body is kept up to this size


class HttpError(Exception):
    """A connection failure or a response this client cannot read."""


class _ClosedUnanswered(Exception):
    """The server closed the connection before any byte of the response."""


EventHandler = Callable[[bytes], None]


class ResponseParser:
    """Incremental reader of one HTTP/1.1 response at a time: status, headers, a chunked or sized
    body, and for a 200 the SSE `data:` payloads in it. `feed` may be given the bytes cut anywhere.
    Its `result` is (status, body of a non-200 response, whether the connection may be reused)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.start(lambda _payload: None)

    def start(self, on_event: EventHandler) -> None:
        self._on_event = on_event
        self._state = "head"
        self._remaining = 0
        self._sse = bytearray()
        self._body = bytearray()
        self.status = 0
        self.keep_alive = True
        self.result: tuple[int, bytes, bool] | None = None

    def feed(self, data: bytes) -> None:
        """Raises HttpError on bytes that are not a response (or that follow a complete one)."""
        if not data:
            return
        buf = self._buf
        if not buf and not self._sse and self._state == "chunk-size" and self.status == 200:
            # the usual read: exactly one HTTP chunk holding exactly one one-line `data: ` event
            # (far cheaper here than through the general path below; same result)
            end = data.find(b"\r\n", 0, 10)
            if end > 0 and data.endswith(b"\n\n\r\n") and data.startswith(b"data: ", end + 2):
                try:
                    size = int(data[:end], 16)
                except ValueError:
                    size = -1
                if size == len(data) - end - 4 and data.find(b"\n", end + 2, -4) < 0:
                    self._on_event(data[end + 8 : -4])
                    return
        buf += data
        if self.result is not None:
            raise HttpError(f"{len(buf)} bytes after the end of a response")
        while self.result is None:
            state = self._state
            if state == "chunk-size":
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise HttpError("chunk size line too long")
                    return
                try:
                    size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                except ValueError:
                    raise HttpError(f"bad chunk size line {bytes(buf[:end][:40])!r}") from None
                del buf[: end + 2]
                if size < 0:
                    raise HttpError("negative chunk size")
                self._state, self._remaining = ("trailer", 0) if size == 0 else ("chunk-data", size)
            elif state == "chunk-data":
                size = self._remaining
                if len(buf) < size + 2:
                    return
                if buf[size : size + 2] != b"\r\n":
                    raise HttpError("chunk not followed by CRLF")
                piece = bytes(buf[:size])
                del buf[: size + 2]
                self._state = "chunk-size"
                self._take(piece)
            elif state == "head":
                self._read_head(buf)
                if self._state == "head":
                    return
            elif state == "trailer":  # trailer lines up to an empty one
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                del buf[: end + 2]
                if end == 0:
                    self._finish()
            else:  # "sized"
                take = min(self._remaining, len(buf))
                self._take(bytes(buf[:take]))
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return
                self._finish()
        if buf:  # (no pipelining: nothing may follow a response before the next request)
            raise HttpError(f"{len(buf)} bytes after the end of a response")

    def _read_head(self, buf: bytearray) -> None:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise HttpError(f"response head over {MAX_HEAD_BYTES} bytes")
            return
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[: end + 4]
        try:
            self.status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise HttpError(f"bad status line {lines[0][:80]!r}") from None
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        self.keep_alive = headers.get("connection", "").lower() != "close"
        if headers.get("transfer-encoding", "").lower() == "chunked":
            self._state = "chunk-size"
            return
        try:
            self._remaining = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(f"bad content-length {headers['content-length'][:40]!r}") from None
        self._state = "sized"
        if self._remaining == 0:
            self._finish()

    def _take(self, piece: bytes) -> None:
        if self.status != 200:
            if len(self._body) < MAX_ERROR_BODY_BYTES:
                self._body += piece[: MAX_ERROR_BODY_BYTES - len(self._body)]
            return
        sse = self._sse
        sse += piece
        end = sse.rfind(b"\n\n")
        if end < 0:
            return
        complete = bytes(sse[:end])
        del sse[: end + 2]
        on_event = self._on_event
        for event in complete.split(b"\n\n"):  # an event's data lines joined by newlines (the SSE rule)
            data = [line[6:] if line[5:6] == b" " else line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                on_event(b"\n".join(data))

    def _finish(self) -> None:
        self._state = "done"
        self.result = (self.status, bytes(self._body), self.keep_alive)


class _SseProtocol(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = ResponseParser()
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._answered = False

    def begin(self, on_event: EventHandler) -> asyncio.Future[tuple[int, bytes, bool]]:
        self._parser.start(on_event)
        self._answered = False
        self._waiter = self._loop.create_future()
        return self._waiter

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._fail(HttpError(f"{len(data)} bytes outside a response"))
            return
        self._answered = True
        try:
            self._parser.feed(data)
        except HttpError as e:
            self._fail(e)
            return
        except Exception as e:  # the caller's event handler: its error ends this request, not the loop
            self._fail(HttpError(f"{type(e).__name__}: {e}"))
            return
        if self._parser.result is not None:
            waiter.set_result(self._parser.result)

    def eof_received(self) -> bool:
        self._fail(HttpError("the server closed the connection mid-response") if self._answered else _ClosedUnanswered())
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            self._fail(HttpError(f"{type(exc).__name__}: {exc}") if self._answered else _ClosedUnanswered())
        else:
            self._fail(HttpError("connection closed mid-response") if self._answered else _ClosedUnanswered())

    def _fail(self, error: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        if self.transport is not None:
            self.transport.close()
        self.closed = True


class SseConnection:
    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._host = parts.hostname
        self._tls = parts.scheme == "https"
        self._port = parts.port or (443 if self._tls else 80)
        self.base_path = parts.path.rstrip("/")
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (
            f"Host: {self._host}:{self._port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\n{auth}"
        ).encode()
        self._timeout_s = timeout_s  # for a whole response
        self._protocol: _SseProtocol | None = None
        self.resent = 0  # requests sent again after the server closed a kept-alive connection

    async def _connect(self) -> tuple[_SseProtocol, bool]:
        """The connection, and whether it was reused (kept alive from an earlier request)."""
        if self._protocol is None or self._protocol.closed:
            loop = asyncio.get_running_loop()
            context = ssl.create_default_context() if self._tls else None
            _, protocol = await loop.create_connection(lambda: _SseProtocol(loop), self._host, self._port, ssl=context)
            self._protocol = protocol
            return protocol, False
        return self._protocol, True

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None

    async def request(self, path: str, body: bytes, on_event: EventHandler) -> tuple[int, bytes]:
        """POST `body`; call `on_event(payload)` for each SSE `data:` payload of a 200 response as
        its bytes arrive. Returns the status and the body of a non-200 response (b"" for a 200).
        An exception raised by `on_event` ends the request as an HttpError naming it."""
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            (self.base_path + path).encode(), self._head, len(body), body
        )
        while True:
            reused = False  # (a connect that fails is not a kept-alive connection closed under us)
            try:
                protocol, reused = await self._connect()
                waiter = protocol.begin(on_event)
                assert protocol.transport is not None
                protocol.transport.write(request)
                status, content, keep_alive = await asyncio.wait_for(waiter, self._timeout_s)
                break
            except _ClosedUnanswered:
                self.close()
                # the server may close a kept-alive connection just as a request goes out on it;
                # nothing was answered, so sending again on a new connection is safe (as browsers do)
                if reused:
                    self.resent += 1
                    continue
                raise HttpError("the server closed the connection without answering") from None
            except HttpError:
                self.close()
                raise
            except (OSError, asyncio.TimeoutError) as e:
                self.close()
                raise HttpError(f"{type(e).__name__}: {e}") from None
        if not keep_alive:
            self.close()
        return status, content
