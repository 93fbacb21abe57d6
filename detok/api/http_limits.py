"""HTTP limits uvicorn (with httptools) does not have settings for:

- headers: a connection must finish its request line and headers within `header_timeout_s` of
  opening (or of the request's first byte on a kept-alive connection), in at most
  `max_header_bytes`, else it gets a 408 / 431 and is closed (slowloris connections do not pile up).
  The size is what the parser delivered (method, target, every header name and value, and their
  delimiters), checked when the headers complete whatever the read boundaries, and while they
  are still incomplete from the bytes received (an endless header is cut off early);
- connections: past `max_connections` open at once, a new one gets a 503 and is closed;
- body: `read_body` takes a request's body within `body_timeout_s` (408) and at most
  `max_body_bytes` (413, from Content-Length before reading, or while reading a chunked body).
  Refusals carry `Connection: close`, so an unread body never reaches the next request.

A connection closed while its client may still be sending (a refused body, unfinished headers) is
closed lingering, as nginx does: the response is flushed and the sending side shut, then whatever
the client still sends is read and dropped for up to `LINGER_S`. A plain close with unread bytes
makes the kernel reset the connection, and the client loses the 413/408 it was sent.

Idle kept-alive connections are closed by uvicorn's own `timeout_keep_alive`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from detok.api.errors import RequestError, error_json
from detok.api.limits import LINGER_S, HttpLimits

_CLOSE = {"Connection": "close"}


class _HeadersTooLarge(Exception):
    """Raised in a parser callback to stop parsing a refused request."""


async def read_body(request: Request, limits: HttpLimits) -> bytes:
    """The request body; RequestError 413/408 past the limits, ClientDisconnect if the client left."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise _too_large(limits, int(declared))
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise _too_large(limits, None)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestError(f"the request body did not arrive within {limits.body_timeout_s:g} s", status=408,
                           code="request_timeout", headers=_CLOSE) from None
    return b"".join(chunks)


def _too_large(limits: HttpLimits, size: int | None) -> RequestError:
    got = f" ({size} bytes)" if size is not None else ""
    return RequestError(f"the request body is larger than {limits.max_body_bytes} bytes{got}", status=413,
                        code="request_too_large", headers=_CLOSE)


def _raw_response(status: int, reason: str, message: str) -> bytes:
    body = error_json(RequestError(message, status=status, code=reason.lower().replace(" ", "_")))
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: `close()` lingers when the protocol says the
    client may still be sending; everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: LimitedHttpToolsProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._lingering = False
        self.write = transport.write  # the hot path, without a __getattr__ per chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if self._lingering or transport.is_closing() or not self._protocol.client_may_be_sending():
            transport.close()
            return
        self._lingering = True
        self._protocol.discard_input = True
        if transport.can_write_eof():
            transport.write_eof()  # the response goes out first, then our FIN
        transport.resume_reading()
        self._protocol.loop.call_later(LINGER_S, transport.close)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, a header size bound and a connection
    bound (`limits` is set on the subclass `protocol_class` makes)."""

    limits: HttpLimits = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # bytes received while the headers are incomplete
        self._header_fields = 0  # bytes of request line and headers, as parsed
        self._in_headers = False
        self.discard_input = False  # lingering close: what the client still sends is dropped
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, "Service Unavailable",
                         f"the server has {self.limits.max_connections} connections open; retry later")
            return
        self._start_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_deadline()
        super().connection_lost(exc)

    def client_may_be_sending(self) -> bool:
        """Refused here, unfinished headers, or a request body not read to its end."""
        return self._refused or self._in_headers or (self.cycle is not None and self.cycle.more_body)

    def eof_received(self) -> bool | None:
        return None  # the client is done sending: close (a lingering close ends here too)

    def data_received(self, data: bytes) -> None:
        if self.discard_input:
            return
        in_headers = self._in_headers
        super().data_received(data)
        if in_headers and self._in_headers:  # still no end of headers (data may also hold body bytes)
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse(431, "Request Header Fields Too Large",
                             f"request line and headers are larger than {self.limits.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_headers:  # the next request on a kept-alive connection
            self._start_headers()

    def on_url(self, url: bytes) -> None:
        self._header_fields += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_fields += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._stop_header_deadline()
        self._in_headers = False
        # method, the spaces and " HTTP/1.1" + CRLF around the target, the blank line
        size = self._header_fields + len(self.parser.get_method()) + 13
        if size > self.limits.max_header_bytes:
            self._refuse(431, "Request Header Fields Too Large",
                         f"request line and headers are larger than {self.limits.max_header_bytes} bytes")
            raise _HeadersTooLarge  # stops the parser: no request is started
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # (a refusal of ours that stopped the parser was answered already)
            super().send_400_response(msg)

    def _start_headers(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        self._header_fields = 0
        self._stop_header_deadline()
        self._header_deadline = self.loop.call_later(self.limits.header_timeout_s, self._headers_too_slow)

    def _stop_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self._in_headers:
            self._refuse(408, "Request Timeout",
                         f"the request headers did not arrive within {self.limits.header_timeout_s:g} s")

    def _refuse(self, status: int, reason: str, message: str) -> None:
        self._stop_header_deadline()
        self._in_headers = False
        self._refused = True
        if not self.transport.is_closing():
            self.transport.write(_raw_response(status, reason, message))
            self.transport.close()


def protocol_class(limits: HttpLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class to give uvicorn (`Config(http=...)`) for these limits."""
    return type("DetokHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
