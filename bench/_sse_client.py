"""A lean HTTP/1.1 client for streamed (SSE) POSTs over asyncio streams: one keep-alive
connection per simulated user, the response body handed over as it arrives.

Why not httpx (used elsewhere for plain requests): measured against `detok serve` on a 2-core
machine, httpx spends ~100 us of client CPU per SSE chunk, so the load generator saturates a core
near 10k chunks/s, well before the server; and reusing a connection after a fully read streamed
response stalled some requests for ~5 s under concurrency (a raw socket client on the same
server shows no stall). The measuring instrument must not be the bottleneck.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit


class HttpError(Exception):
    """A connection failure or a response this client cannot read."""


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
        self._timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.resent = 0  # requests sent again after the server closed a kept-alive connection

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """The connection, and whether it was reused (kept alive from an earlier request)."""
        if self._reader is None or self._writer is None or self._writer.is_closing():
            context = ssl.create_default_context() if self._tls else None
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port, ssl=context)
            return self._reader, self._writer, False
        return self._reader, self._writer, True

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, AsyncIterator[bytes]]:
        """Send a POST; return the status and an iterator over the body's pieces as they arrive.
        The body must be read to its end for the connection to be reused (else call close())."""
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            (self.base_path + path).encode(), self._head, len(body), body
        )
        while True:
            reused = False  # (a connect that fails is not a kept-alive connection closed under us)
            try:
                reader, writer, reused = await self._connect()
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._timeout_s)
                break
            except (OSError, asyncio.IncompleteReadError) as e:
                self.close()
                # the server may close a kept-alive connection just as a request goes out on it;
                # nothing was answered, so sending again on a new connection is safe (as browsers do)
                if reused and not (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                    self.resent += 1
                    continue
                raise HttpError(f"{type(e).__name__}: {e}") from None
            except (asyncio.LimitOverrunError, asyncio.TimeoutError) as e:
                self.close()
                raise HttpError(f"{type(e).__name__}: {e}") from None
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self.close()
            raise HttpError(f"bad status line {lines[0]!r}") from None
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        return status, self._body(reader, headers)

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
        try:
            if headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), self._timeout_s)
                    size = int(size_line.split(b";", 1)[0], 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")  # end of the (empty) trailer section
                        break
                    data = await asyncio.wait_for(reader.readexactly(size + 2), self._timeout_s)
                    yield data[:-2]
            else:
                length = int(headers.get("content-length", "0"))
                yield await asyncio.wait_for(reader.readexactly(length), self._timeout_s)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError) as e:
            self.close()
            raise HttpError(f"{type(e).__name__}: {e}") from None
        if headers.get("connection", "").lower() == "close":
            self.close()
