"""`SseResponse` under uvicorn's own request cycle (a real `RequestResponseCycle` over a transport
that records its writes): every chunk is one write framed as uvicorn frames it, and the
response's tail (the finish event, usage, `[DONE]`) goes out with the body's end in one write,
not one write each."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from detok.frontend.responses import ResponseContext, stream_events
from detok.frontend.sse_response import RAW_SEND, SseResponse
from detok.receiver.receiver import RequestDelta
from detok.stream.params import Finish

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


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize("include_usage", [True, False])
def test_the_tail_and_the_end_of_the_body_are_one_write(kind: str, include_usage: bool) -> None:
    deltas = [RequestDelta("Hel"), RequestDelta("lo"), RequestDelta("", Finish("length"), 3)]

    async def run() -> tuple[list[bytes], bool]:
        transport = _Transport()
        scope: dict[str, Any] = {"type": "http", "method": "POST", "http_version": "1.1", "headers": []}
        cycle = RequestResponseCycle(scope, transport, FlowControl(transport), logging.getLogger("t"),
                                     logging.getLogger("t"), False, [], asyncio.Event(), False, True, lambda: None)
        scope[RAW_SEND] = cycle.send
        ctx = ResponseContext(kind, "id-1", "m", 3, include_usage, 0.0)  # type: ignore[arg-type]
        released: list[bool] = []
        response = SseResponse(stream_events(ctx, [_Stream(deltas)], None),
                               lambda client_gone: released.append(client_gone), ctx)
        await response(scope, cycle.receive, cycle.send)
        return transport.writes, released == [False]

    writes, released = asyncio.run(run())
    assert released and writes[0].startswith(b"HTTP/1.1 200")
    body = writes[1:]
    last = body[-1]
    assert last.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")  # [DONE] and the chunked body's end
    assert last.count(b"data: ") == 2 + include_usage and b'"finish_reason":"length"' in last
    texts = body[:-1]
    assert len(texts) == 2 + (kind == "chat")  # (chat: the role chunk first), one write per text chunk
    assert all(w.endswith(b"\n\n\r\n") and w.count(b"data: ") == 1 for w in texts)
