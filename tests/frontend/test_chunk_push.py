"""Chunks written by the receiving loop (`RequestStream.push_to`, `detok.streaming.chunk_push`).

- A waiting consumer's deltas go to its pusher once per event-loop turn, a batch's parts
  together; a pusher that declines wakes the consumer, which takes them; what it raises, the
  consumer raises; a busy consumer is never pushed to; the finish and an error end are the
  consumer's.
- A streamed response whose plain chunks go out from the receiving loop is the response the
  consumer alone writes: the same text in order, the same finish and `[DONE]`, for any batches,
  any loop turns between them and a client that stops and starts reading (hypothesis); and most
  chunks were the pusher's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.api.responses import ResponseContext, stream_events
from detok.receiver.receiver import DeltaReceiver, RequestDelta, RequestStream
from detok.wire.params import Finish
from detok.wire.to_frontends import DeltaBatch, RequestFinished

pytestmark = pytest.mark.timeout(60)


def _batch(rid: int, text: str, offset: int, finish: Finish | None = None, tokens: int = 0) -> DeltaBatch:
    done = [RequestFinished(rid, finish, tokens)] if finish is not None else []
    return DeltaBatch.from_rows(0, 0.0, [rid] if text else [], [text] if text else [], [offset] if text else [], done)


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _taking(got: list[RequestDelta]) -> Any:
    def pusher(stream: RequestStream) -> bool:
        if not stream.plain_pending:
            return False
        delta = stream.take()
        if delta is not None:
            got.append(delta)
        return True
    return pusher


def test_a_waiting_consumers_deltas_go_to_its_pusher_once_per_turn() -> None:
    async def main() -> None:
        rx = DeltaReceiver()
        try:
            s = rx.open(1)
            got: list[RequestDelta] = []
            calls: list[int] = []
            take = _taking(got)
            s.push_to(lambda st: calls.append(1) or take(st))
            consumer = asyncio.ensure_future(s.__anext__())
            await _turns()
            rx.dispatch(_batch(1, "Hel", 0))
            rx.dispatch(_batch(1, "lo", 3))  # (same turn: one push)
            await _turns()
            assert [d.text for d in got] == ["Hello"] and len(calls) == 1 and not consumer.done()
            rx.dispatch(_batch(1, " you", 5, Finish("length"), 3))  # the finish: the consumer's
            await _turns()
            delta = await asyncio.wait_for(consumer, 5)
            assert (delta.text, delta.finish, delta.num_tokens) == (" you", Finish("length"), 3)
            assert [d.text for d in got] == ["Hello"]
        finally:
            rx.close()

    uvloop.run(main())


def test_a_declining_or_raising_pusher_leaves_the_deltas_to_the_consumer() -> None:
    async def main() -> None:
        rx = DeltaReceiver()
        try:
            s = rx.open(1)
            s.push_to(lambda st: False)
            consumer = asyncio.ensure_future(s.__anext__())
            await _turns()
            rx.dispatch(_batch(1, "ab", 0))
            assert (await asyncio.wait_for(consumer, 5)).text == "ab"

            def broken(st: RequestStream) -> bool:
                raise KeyError("render failed")

            s.push_to(broken)
            consumer = asyncio.ensure_future(s.__anext__())
            await _turns()
            rx.dispatch(_batch(1, "cd", 2))
            with pytest.raises(KeyError, match="render failed"):
                await asyncio.wait_for(consumer, 5)
            # the pusher is dropped; the text it never took is still there for the consumer
            consumer = asyncio.ensure_future(s.__anext__())
            assert (await asyncio.wait_for(consumer, 5)).text == "cd"
        finally:
            rx.close()

    uvloop.run(main())


def test_no_push_to_a_busy_consumer_nor_after_push_to_none_and_fail_all_reaches_the_consumer() -> None:
    async def main() -> None:
        rx = DeltaReceiver()
        try:
            s = rx.open(1)
            got: list[RequestDelta] = []
            s.push_to(_taking(got))
            rx.dispatch(_batch(1, "early", 0))  # nobody waits: stays for take()
            await _turns()
            assert got == [] and (await s.__anext__()).text == "early"
            s.push_to(None)
            consumer = asyncio.ensure_future(s.__anext__())
            await _turns()
            rx.dispatch(_batch(1, "x", 5))
            assert (await asyncio.wait_for(consumer, 5)).text == "x" and got == []
            s.push_to(_taking(got))
            consumer = asyncio.ensure_future(s.__anext__())
            await _turns()
            assert rx.fail_all("scheduler gone") == 1
            delta = await asyncio.wait_for(consumer, 5)
            assert delta.finish == Finish("error", None, "scheduler gone") and got == []
        finally:
            rx.close()

    uvloop.run(main())


class _Writer:
    """A connection: chunks in wire order, from the consumer and the pusher; readable or not."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.pushed = 0
        self.open = True

    def ready(self) -> bool:
        return self.open

    def write(self, chunk: bytes) -> None:  # (the pusher's writes)
        assert self.open, "a chunk pushed to a client that does not read"
        self.out.append(chunk)
        self.pushed += 1

    async def consumer_write(self, chunk: bytes) -> None:  # (_write_chunked's: waits while paused)
        while not self.open:
            await asyncio.sleep(0.001)
        self.out.append(chunk)


class _Flow:
    def __init__(self, writer: _Writer) -> None:
        self._writer = writer

    @property
    def write_paused(self) -> bool:
        return not self._writer.open


class _Cycle:
    disconnected = False


class _FramedWriter(_Writer):
    """A connection as `DirectWriter` shows it to the compiled pusher (`parts`): its chunks come
    framed as HTTP chunks, unframed here."""

    def write(self, chunk: bytes) -> None:
        self._raw_write(b"%x\r\n%b\r\n" % (len(chunk), chunk))

    def parts(self) -> tuple[Any, Any, Any]:
        return _Flow(self), _Cycle(), self._raw_write

    def _raw_write(self, framed: bytes) -> None:
        size, _, rest = framed.partition(b"\r\n")
        assert int(size, 16) == len(rest) - 2 and rest.endswith(b"\r\n"), framed
        _Writer.write(self, rest[:-2])


def _parsed(chunks: list[bytes]) -> tuple[str, list[Any]]:
    text, tail = [], []
    for payload in (event[6:] for c in chunks for event in c.split(b"\n\n")[:-1]):
        if payload == b"[DONE]":
            tail.append("[DONE]")
            continue
        body = json.loads(payload)
        for choice in body["choices"]:
            text.append(choice["delta"].get("content") or "")
            if choice["finish_reason"]:
                tail.append(choice["finish_reason"])
    return "".join(text), tail


_EVENTS = st.lists(st.one_of(st.text(min_size=1, max_size=6).map(lambda t: ("text", t)),
                             st.sampled_from([("pause", ""), ("resume", ""), ("turn", "")])), max_size=40)


@settings(max_examples=80, deadline=None)
@given(events=_EVENTS, push=st.booleans(), usage=st.booleans(), framed=st.booleans())
def test_pushed_chunks_make_the_consumers_response(events: list[tuple[str, str]], push: bool, usage: bool,
                                                   framed: bool) -> None:
    """(`usage`: continuous usage stats, a chunk that is not its text alone: the pusher's general
    path; without, its text-only one, compiled where the writer shows its `parts`: `framed`.)"""
    async def main() -> tuple[str, list[Any], int, int]:
        rx = DeltaReceiver()
        writer = _FramedWriter() if framed else _Writer()
        try:
            s = rx.open(7)
            ctx = ResponseContext("chat", "id-1", "m", 3, False, 0.0)  # type: ignore[arg-type]
            ctx.direct = writer if push else None
            ctx.continuous_usage = usage

            async def consume() -> None:  # SseResponse's loop: each chunk written as it comes
                async for chunk in stream_events(ctx, [s], None):
                    await writer.consumer_write(chunk)

            task = asyncio.ensure_future(consume())
            await _turns()
            offset, texts = 0, 0
            for kind, text in events:
                if kind == "text":
                    rx.dispatch(_batch(7, text, offset))
                    offset += len(text)
                    texts += 1
                elif kind == "pause":
                    writer.open = False
                elif kind == "resume":
                    writer.open = True
                else:
                    await _turns(1)
            writer.open = True
            rx.dispatch(_batch(7, "", offset, Finish("length"), texts))
            await asyncio.wait_for(task, 10)
            text, tail = _parsed(writer.out)
            return text, tail, writer.pushed, texts
        finally:
            rx.close()

    text, tail, pushed, _ = uvloop.run(main())
    assert text == "".join(t for kind, t in events if kind == "text")
    assert tail == ["length", "[DONE]"]
    if not push:
        assert pushed == 0


@pytest.mark.parametrize("framed", [False, True], ids=["python", "compiled"])
def test_most_chunks_of_a_steady_stream_are_pushed(framed: bool) -> None:
    events = [("text", f"w{k} ") for k in range(30)]
    events = [e for pair in zip(events, [("turn", "")] * 30) for e in pair]

    async def main() -> tuple[int, int]:
        rx = DeltaReceiver()
        writer = _FramedWriter() if framed else _Writer()
        try:
            s = rx.open(7)
            ctx = ResponseContext("completion", "id-1", "m", 3, False, 0.0)  # type: ignore[arg-type]
            ctx.direct = writer

            async def consume() -> None:
                async for chunk in stream_events(ctx, [s], None):
                    writer.out.append(chunk)

            task = asyncio.ensure_future(consume())
            await _turns()
            offset = 0
            for kind, text in events:
                if kind == "text":
                    rx.dispatch(_batch(7, text, offset))
                    offset += len(text)
                else:
                    await _turns(2)
            rx.dispatch(_batch(7, "", offset, Finish("length"), 30))
            await asyncio.wait_for(task, 10)
            return writer.pushed, len(writer.out)
        finally:
            rx.close()

    pushed, total = uvloop.run(main())
    assert pushed >= 28 and total == pushed + 1  # (the finish chunk with [DONE]: the consumer's, one write)


def test_a_failing_push_wakes_its_consumer_and_the_others_still_get_theirs(monkeypatch: pytest.MonkeyPatch) -> None:
    real = RequestStream._push

    def push(self: RequestStream) -> None:
        if self.rid == 1:
            raise RuntimeError("a bug in the push itself")
        real(self)

    monkeypatch.setattr(RequestStream, "_push", push)

    async def main() -> None:
        rx = DeltaReceiver()
        try:
            a, b = rx.open(1), rx.open(2)
            got: list[RequestDelta] = []
            a.push_to(_taking([]))
            b.push_to(_taking(got))
            first = asyncio.ensure_future(a.__anext__())
            second = asyncio.ensure_future(b.__anext__())
            await _turns()
            rx.dispatch(DeltaBatch.from_rows(0, 0.0, [1, 2], ["one", "two"], [0, 0], []))
            await _turns()
            assert (await asyncio.wait_for(first, 5)).text == "one"  # woken: it takes its text itself
            assert [d.text for d in got] == ["two"] and not second.done()
            second.cancel()
        finally:
            rx.close()

    uvloop.run(main())
