"""HTTP limits, disconnects and shutdown of a live `detok serve`, with raw sockets: body limit
(413 by Content-Length and while streaming), body and header deadlines (408, slowloris), header
size (431), the connection bound (503), one log line at most per client that hangs up, and
SIGINT with 50 open streams (each ends with an error event and [DONE], no traceback)."""

from __future__ import annotations

import json
import selectors
import signal
import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

from tests.helpers.serve_helpers import LiveServer
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

MAX_BODY = 65536
# the header deadline stays past the connection-bound test's 1 s of quiet (its open connections
# send no headers); the body deadline is what the 408 test waits
HEADER_TIMEOUT = 2
BODY_TIMEOUT = 1
MAX_CONNECTIONS = 80
STREAM_BODY = json.dumps({"prompt": "Hi", "max_tokens": 20000, "ignore_eos": True, "stream": True}).encode()


def _start() -> LiveServer:
    return LiveServer("--workers", "1", "--no-spare", "--step-ms", "5", "--max-body-bytes", str(MAX_BODY),
                      "--http-header-timeout", str(HEADER_TIMEOUT), "--http-body-timeout", str(BODY_TIMEOUT),
                      "--max-connections", str(MAX_CONNECTIONS), "--log-level", "info")


def _close(live: LiveServer) -> None:
    if live.proc.poll() is None:
        live.stop(signal.SIGTERM)
    live.kill_group()


@pytest.fixture(scope="module")
def server():
    """Shared by the tests that leave it serving (a test that stops a server starts its own)."""
    live = _start()
    try:
        yield live
    finally:
        _close(live)


@pytest.fixture
def own_server():
    live = _start()
    try:
        yield live
    finally:
        _close(live)


def _connect(server: LiveServer) -> socket.socket:
    url = urlparse(server.base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    return sock


def _read_to_eof(sock: socket.socket, timeout: float = 60.0) -> bytes:
    """Everything the server sends until it closes the connection (fails the test if it does not)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _request_head(path: str, length: int | None = None, chunked: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    return (head + "\r\n").encode()


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_body_over_the_limit_by_content_length_is_413_unread(server):
    with _connect(server) as sock:
        sock.sendall(_request_head("/v1/completions", length=300_000_000))  # nothing of the body is sent
        response = _read_to_eof(sock)
    # 413, not the 408 of a body that never came: refused from the header alone
    assert _status(response) == 413 and b"request_too_large" in response


def test_chunked_body_over_the_limit_is_413(server):
    with _connect(server) as sock:
        sock.sendall(_request_head("/v1/completions", chunked=True))
        chunk = b"x" * 8192
        try:
            for _ in range(MAX_BODY // len(chunk) + 4):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close as soon as it has refused
        response = _read_to_eof(sock)
    assert _status(response) == 413


def test_body_shorter_than_its_content_length_is_408(server):
    with _connect(server) as sock:
        t0 = time.monotonic()
        sock.sendall(_request_head("/v1/completions", length=100) + b'{"prompt":')
        response = _read_to_eof(sock)
        waited = time.monotonic() - t0
    assert _status(response) == 408 and b"did not arrive" in response
    assert waited >= BODY_TIMEOUT * 0.9  # not before its deadline (a loaded box may only make it later)


def test_slow_headers_are_408_and_closed(server):
    """Slowloris: 60 connections that never finish their headers (one trickles a header line
    every 0.3 s) are all answered 408 and closed after the header deadline."""
    selector = selectors.DefaultSelector()
    received: dict[socket.socket, bytearray] = {}
    for _ in range(60):
        sock = _connect(server)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n")
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        received[sock] = bytearray()
    trickler = next(iter(received))
    t0 = time.monotonic()
    open_ = set(received)
    try:
        while open_ and time.monotonic() - t0 < HEADER_TIMEOUT + 120:  # a hang fails, a slow box passes
            if trickler in open_:
                try:
                    trickler.send(b"X-Slow: 1\r\n")
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    pass
            for key, _ in selector.select(timeout=0.3):
                sock = key.fileobj
                try:
                    chunk = sock.recv(65536)  # type: ignore[union-attr]
                except ConnectionResetError:
                    chunk = b""
                received[sock].extend(chunk)  # type: ignore[index]
                if not chunk:
                    selector.unregister(sock)
                    open_.discard(sock)  # type: ignore[arg-type]
        assert not open_, f"{len(open_)} slow connections still open"
        assert time.monotonic() - t0 >= HEADER_TIMEOUT * 0.9
        assert all(_status(bytes(data)) == 408 for data in received.values())
    finally:
        for sock in received:
            sock.close()


def test_huge_headers_are_431(server):
    with _connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n")
        try:
            for i in range(100):
                sock.sendall(f"X-Filler-{i}: {'a' * 1000}\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = _read_to_eof(sock)
    assert _status(response) == 431


@pytest.mark.parametrize("size", [70_000, 100_000, 200_000])
def test_a_header_over_the_bound_in_one_write_is_431(server, size):
    """The write that completes the headers counts too: 100 KB sent at once is refused, not served."""
    with _connect(server) as sock:
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = _read_to_eof(sock)
    assert _status(response) == 431 and b"HTTP/1.1 400" not in response


def test_headers_just_under_the_bound_are_served(server):
    with _connect(server) as sock:
        filler = b"a" * (65536 - 200)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nConnection: close\r\nX-Big: " + filler + b"\r\n\r\n")
        response = _read_to_eof(sock)
    assert _status(response) == 200


def test_connections_past_the_bound_get_503_and_the_server_keeps_serving(server):
    socks = [_connect(server) for _ in range(MAX_CONNECTIONS + 5)]
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    answers: dict[socket.socket, bytes] = {}
    try:
        # accepted connections wait silently for a request; the refused ones are answered 503 and
        # closed: wait for the first refusal, then for the others the server sends along with it
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and (not answers or selector.select(timeout=1.0)):
            for key, _ in selector.select(timeout=1.0):
                sock = key.fileobj
                try:
                    data = sock.recv(65536)  # type: ignore[union-attr]
                except (ConnectionResetError, BlockingIOError):
                    data = b""
                answers[sock] = answers.get(sock, b"") + data  # type: ignore[index]
                if not data:
                    selector.unregister(sock)
        refused = sum(1 for data in answers.values() if data and _status(data) == 503)
        assert 1 <= refused <= 5, answers
        assert all(data == b"" or _status(data) == 503 for data in answers.values()), answers
    finally:
        for sock in socks:
            sock.close()

    def healthy() -> bool:
        try:
            return server.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 60, 0.1, "the server serves again once the connections closed")


_markers = iter(range(1_000_000))


def _output_until_marker(server: LiveServer, start: int) -> str:
    """What the server logged from line `start` up to a marker request made now (its access line
    excluded): instead of reading the log after a fixed pause, a later request's line bounds it."""
    marker = f"/health?marker={next(_markers)}"
    assert server.get(marker).status_code == 200
    wait_until(lambda: any(marker in line for line in server.lines[start:]), 60, 0.05, lambda: server.output[-3000:])
    lines = server.lines[start:]
    return "".join(lines[: next(i for i, line in enumerate(lines) if marker in line)])


def test_client_hanging_up_while_sending_its_body_is_one_info_line(server):
    start = len(server.lines)
    with _connect(server) as sock:
        peer = f"127.0.0.1:{sock.getsockname()[1]}"  # this client's lines (a line of an earlier test may come late)
        sock.sendall(_request_head("/v1/completions", length=1000) + b'{"prompt": "abc')
    # the head reaches the server before the hang-up (tcp keeps the order): the app reads the
    # body, gets the disconnect and says so once
    wait_until(lambda: "disconnected" in "".join(server.lines[start:]), 60, 0.05, lambda: server.output[-3000:])
    out = _output_until_marker(server, start)
    assert "Traceback" not in out and "ERROR" not in out, out
    assert len([line for line in out.splitlines() if "disconnected" in line or "went away" in line]) <= 1, out
    assert len([line for line in out.splitlines() if peer in line]) <= 1, out


def test_client_hanging_up_mid_stream_is_one_info_line(server):
    with _connect(server) as sock:
        peer = f"127.0.0.1:{sock.getsockname()[1]}"  # this client's lines (a line of an earlier test may come late)
        sock.sendall(_request_head("/v1/completions", length=len(STREAM_BODY)) + STREAM_BODY)
        sock.settimeout(60)
        data = b""
        while b"data: {" not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        start = len(server.lines)
    wait_until(lambda: "went away" in "".join(server.lines[start:]), 60, 0.05, lambda: server.output[-3000:])
    out = _output_until_marker(server, start)
    assert "Traceback" not in out and "ERROR" not in out, out
    assert len([line for line in out.splitlines() if "went away" in line]) == 1, out
    # that line, and uvicorn's access line of the request (logged before `start`, or after)
    assert len([line for line in out.splitlines() if peer in line]) <= 2, out


def test_sigint_with_50_open_streams_ends_each_with_an_error_and_done(own_server):
    server = own_server
    socks = []
    for _ in range(50):
        sock = _connect(server)
        sock.sendall(_request_head("/v1/completions", length=len(STREAM_BODY)) + STREAM_BODY)
        socks.append(sock)
    received = []
    for sock in socks:  # every stream is under way
        sock.settimeout(20)
        data = b""
        while b"data: {" not in data:
            data += sock.recv(65536)
        received.append(data)
    start = len(server.lines)
    server.proc.send_signal(signal.SIGINT)
    for i, sock in enumerate(socks):
        received[i] += _read_to_eof(sock, timeout=30)
        sock.close()
    code = server.proc.wait(60)
    out = "".join(server.lines[start:])
    assert code == 0, out
    assert "Traceback" not in out and "CancelledError" not in out, out
    for data in received:
        events = [line[6:] for line in data.decode().splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["message"] == "the server is shutting down"
    assert not server.leftovers(), out
    with pytest.raises(httpx.ConnectError):
        server.get("/health")
