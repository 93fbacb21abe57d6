"""bench/_sse_client.py, the load client's HTTP reader: the events and the result do not depend on
how the bytes are cut into reads; bad responses are HttpErrors, not hangs or loop errors; a
kept-alive connection closed unanswered is resent once, an answered one is not. Real sockets."""

from __future__ import annotations

import asyncio
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench._sse_client import MAX_HEAD_BYTES, HttpError, ResponseParser, SseConnection

pytestmark = pytest.mark.timeout(60)

EVENTS = [b'{"choices": [{"delta": {"content": "h\\u00e9"}}]}', b'{"choices": []}', b"[DONE]"]


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


SSE_BODY = b"".join(b"data: " + e + b"\n\n" for e in EVENTS)
STREAM = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
          + _chunked([SSE_BODY[:7], SSE_BODY[7:60], SSE_BODY[60:]]))
ERROR = b'{"error": {"message": "bad"}}'
REFUSED = b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(ERROR), ERROR)


def _parse(data: bytes, cuts: list[int]) -> tuple[list[bytes], tuple[int, bytes, bool] | None]:
    events: list[bytes] = []
    parser = ResponseParser()
    parser.start(events.append)
    last = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        parser.feed(data[last:cut])
        last = cut
    return events, parser.result


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_events_do_not_depend_on_how_the_bytes_arrive(cuts: list[int]) -> None:
    assert _parse(STREAM, cuts) == (EVENTS, (200, b"", True))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, len(REFUSED)), max_size=6))
def test_a_refusal_body_is_kept_and_the_connection_not_reused(cuts: list[int]) -> None:
    assert _parse(REFUSED, cuts) == ([], (400, ERROR, False))


_LINES = st.sampled_from([b"data: x", b"data: {\"a\": 1}", b"data:y", b"data: ", b": ping", b"event: e", b"data: [DONE]"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_LINES, min_size=1, max_size=3), max_size=6), st.data())
def test_reads_of_whole_chunks_give_the_events_of_any_other_cut(events: list[list[bytes]], data: st.DataObject) -> None:
    """A read that is exactly one chunk of one one-line event takes a short path: reads cut at
    the chunk boundaries (as a server's writes arrive) give what byte-by-byte reads give."""
    body = b"".join(b"\n".join(lines) + b"\n\n" for lines in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if b > a]
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    data = [[line[6:] if line[5:6] == b" " else line[5:] for line in lines if line.startswith(b"data:")] for lines in events]
    expected = [b"\n".join(d) for d in data if d]  # (an event's data lines joined, as SSE has it)
    whole = [len(head)]
    for piece in pieces:
        whole.append(whole[-1] + len(b"%x\r\n%s\r\n" % (len(piece), piece)))
    stream = head + _chunked(pieces)
    assert _parse(stream, whole) == (expected, (200, b"", True))
    assert _parse(stream, list(range(len(stream)))) == (expected, (200, b"", True))


def test_a_read_that_looks_like_a_whole_chunk_but_is_not() -> None:
    content = b"data: x\n\n\r\ndata: y\n\n"  # a read cut after its first CRLF looks like one whole chunk
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    stream = head + _chunked([content])
    assert _parse(stream, [len(head), len(head) + 4 + content.index(b"\r\n") + 2]) == ([b"x", b"y"], (200, b"", True))


def test_sse_field_forms_and_multi_line_events() -> None:
    body = b"data:a\n\ndata: b\ndata: c\n\n: comment\n\nevent: x\ndata: d\n\n"
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    assert _parse(head + _chunked([body]), []) == ([b"a", b"b\nc", b"d"], (200, b"", True))


@pytest.mark.parametrize("data, match", [
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "bad status line"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXY", "not followed by CRLF"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: nope\r\n\r\n", "bad content-length"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\nextra", "after the end"),
    (b"HTTP/1.1 200 OK\r\nx: " + b"a" * (MAX_HEAD_BYTES + 1), "head over"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"1" * 2000, "size line too long"),
])
def test_bad_responses_are_http_errors(data: bytes, match: str) -> None:
    parser = ResponseParser()
    with pytest.raises(HttpError, match=match):
        parser.feed(data)


async def _serve(answers: list[bytes | None]) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A server answering each request read, in turn, with `answers` (None: close unanswered);
    returns it, its port, and the connection number each request came in on."""
    seen: list[int] = []
    connections = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        number = connections[0]
        try:
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                seen.append(number)
                answer = answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def test_requests_reuse_the_connection_and_a_closed_one_is_resent_once() -> None:
    async def run() -> tuple[list[tuple[int, bytes]], list[list[bytes]], list[int], int]:
        server, port, seen = await _serve([STREAM, STREAM, None, STREAM, REFUSED])
        conn = SseConnection(f"http://127.0.0.1:{port}/v1", timeout_s=10)
        results, events = [], []
        for _ in range(4):
            got: list[bytes] = []
            results.append(await conn.request("/chat/completions", b"{}", got.append))
            events.append(got)
        conn.close()
        server.close()
        return results, events, seen, conn.resent

    results, events, seen, resent = asyncio.run(run())
    assert results == [(200, b""), (200, b""), (200, b""), (400, ERROR)]
    assert events == [EVENTS, EVENTS, EVENTS, []]
    assert seen == [1, 1, 1, 2, 2] and resent == 1  # the third request went out again on a new connection


def test_an_answered_then_cut_response_is_an_error_not_a_resend() -> None:
    first = b"data: " + EVENTS[0] + b"\n\n"
    cut = STREAM[: STREAM.index(b"\r\n\r\n") + 4] + b"%x\r\n%s\r\n" % (len(first), first) + b"40\r\ndata: {"

    async def run() -> tuple[list[bytes], int]:
        server, port, _ = await _serve([STREAM, cut])  # then closes
        conn = SseConnection(f"http://127.0.0.1:{port}/v1", timeout_s=10)
        await conn.request("/chat/completions", b"{}", lambda _p: None)
        got: list[bytes] = []
        with pytest.raises(HttpError, match="mid-response"):
            await conn.request("/chat/completions", b"{}", got.append)
        server.close()
        return got, conn.resent

    got, resent = asyncio.run(run())
    assert resent == 0 and got == EVENTS[:1]  # the events read before the cut were handed over


def test_a_handler_error_ends_the_request_as_an_http_error() -> None:
    def handler(_payload: bytes) -> None:
        raise ValueError("no good")

    async def run() -> None:
        server, port, _ = await _serve([STREAM])
        conn = SseConnection(f"http://127.0.0.1:{port}/v1", timeout_s=10)
        with pytest.raises(HttpError, match="ValueError: no good"):
            await conn.request("/chat/completions", b"{}", handler)
        server.close()

    asyncio.run(run())


def test_a_silent_server_times_out() -> None:
    """The server accepts and never answers. Its connections' writers are kept: a StreamWriter
    dropped by the callback is closed when collected (Python 3.13), which is an answer of a kind."""
    async def run() -> None:
        held: list[asyncio.StreamWriter] = []
        server = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
        conn = SseConnection(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", timeout_s=0.3)
        with pytest.raises(HttpError, match="TimeoutError"):
            await conn.request("/chat/completions", b"{}", lambda _p: None)
        server.close()

    asyncio.run(run())


def test_a_refused_connection_is_an_http_error() -> None:
    """Nothing listens: the error names the refusal (it once was an UnboundLocalError from the
    resend check, which hid the cause and killed the load point)."""
    with socket.socket() as s:  # a port nothing listens on (bound, not listening)
        s.bind(("127.0.0.1", 0))
        conn = SseConnection(f"http://127.0.0.1:{s.getsockname()[1]}/v1")
        with pytest.raises(HttpError, match="ConnectionRefused"):
            asyncio.run(conn.request("/chat/completions", b"{}", lambda _p: None))
        assert conn.resent == 0
