"""`SseResponse` under uvicorn's own request cycle (a real `RequestResponseCycle` over a transport
that records its writes): the head goes out with chat's role chunk in one write, every text chunk
is one write framed as uvicorn frames it, and the response's tail (the finish event, usage,
`[DONE]`) goes out with the body's end in one write, not one write each."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from detok.api.responses import ResponseContext, stream_events
from detok.streaming.sse_response import RAW_SEND, SseResponse
from detok.receiver.receiver import RequestDelta
from detok.wire.params import Finish

pytestmark = pytest.mark.timeout(30)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _Stream:
    def __init__(self, deltas: list[RequestDelta]) -> None:
        self._deltas = list(deltas)

    def push_to(self, pusher: Any) -> None:  # (no receiving loop here: every delta comes through the consumer)
        pass

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> RequestDelta:
        if not self._deltas:
            raise StopAsyncIteration
        await asyncio.sleep(0)
        return self._deltas.pop(0)


def _respond(kind: str, include_usage: bool, deltas: list[RequestDelta], *, paused: bool = False,
             wrapped_send: bool = False, echo: str = "") -> tuple[list[bytes], bool]:
    async def run() -> tuple[list[bytes], bool]:
        transport = _Transport()
        scope: dict[str, Any] = {"type": "http", "method": "POST", "http_version": "1.1", "headers": []}
        flow = FlowControl(transport)
        cycle = RequestResponseCycle(scope, transport, flow, logging.getLogger("t"),
                                     logging.getLogger("t"), False, [], asyncio.Event(), False, True, lambda: None)
        scope[RAW_SEND] = cycle.send
        if paused:  # the connection's writes paused (a client reading slowly): resumed soon
            flow.pause_writing()
            asyncio.get_running_loop().call_later(0.01, flow.resume_writing)

        async def middleware_send(message: Any) -> None:
            await cycle.send(message)

        ctx = ResponseContext(kind, "id-1", "m", 3, include_usage, 0.0, echo=echo)  # type: ignore[arg-type]
        released: list[bool] = []
        response = SseResponse(stream_events(ctx, [_Stream(deltas)], None),
                               lambda client_gone: released.append(client_gone), ctx)
        await response(scope, cycle.receive, middleware_send if wrapped_send else cycle.send)
        return transport.writes, released == [False]

    return asyncio.run(run())


_DELTAS = [RequestDelta("Hel"), RequestDelta("lo"), RequestDelta("", Finish("length"), 3)]


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize("include_usage", [True, False])
def test_the_tail_and_the_end_of_the_body_are_one_write(kind: str, include_usage: bool) -> None:
    writes, released = _respond(kind, include_usage, _DELTAS)
    assert released and writes[0].startswith(b"HTTP/1.1 200")
    if kind == "chat":  # the head and the role chunk: one write
        head, _, role = writes[0].partition(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head
        assert role.endswith(b"\n\n\r\n") and b'"role":"assistant"' in role and role.count(b"data: ") == 1
    else:  # nothing is ready before the first text: the head alone, at once
        assert writes[0].endswith(b"\r\n\r\n") and b"data: " not in writes[0]
    body = writes[1:]
    last = body[-1]
    assert last.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")  # [DONE] and the chunked body's end
    assert last.count(b"data: ") == 2 + include_usage and b'"finish_reason":"length"' in last
    texts = body[:-1]
    assert len(texts) == 2  # one write per text chunk
    assert all(w.endswith(b"\n\n\r\n") and w.count(b"data: ") == 1 for w in texts)


@pytest.mark.parametrize("how", ["paused", "wrapped_send"])
def test_the_head_goes_alone_where_it_cannot_be_joined_and_the_bytes_are_the_same(how: str) -> None:
    joined, _ = _respond("chat", True, _DELTAS)
    alone, released = _respond("chat", True, _DELTAS, **{how: True})  # type: ignore[arg-type]
    assert released and b"".join(alone) == b"".join(joined)
    assert alone[0].endswith(b"\r\n\r\n") and len(alone) == len(joined) + 1


def test_an_echo_goes_out_with_the_head() -> None:
    writes, _ = _respond("completion", False, _DELTAS, echo="Say: ")
    head, _, first = writes[0].partition(b"\r\n\r\n")
    assert b'"text":"Say: "' in first and first.count(b"data: ") == 1
