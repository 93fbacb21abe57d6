"""The scheduler link's messages of one event-loop turn go out in one run at the turn's end, in
order; a full queue still refuses a request (503) or ends its stream with the same message; a
submission that fails midway leaves nothing at the scheduler. Real zmq sockets throughout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq

from detok.api.errors import RequestError
from detok.api import outbox
from detok.api.outbox import OUTBOX_MAX_QUEUED
from detok.api.scheduler_link import SchedulerLink
from detok.api.validation import GenerationJob
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import DecodeParams
from detok.wire.to_scheduler import Abort, GenerateRequest, SchedulerRequest

_DECODE = msgspec.msgpack.Decoder(SchedulerRequest)


def _job(n: int = 1) -> GenerationJob:
    return GenerationJob(prompt_ids=[1, 2, 3], max_tokens=4, params=DecodeParams(), seed=7, ignore_eos=False,
                         stream=True, include_usage=False, n=n)


@contextlib.contextmanager
def _scheduler(tmp_path: Path, hwm: int | None = None, bind: bool = True) -> Iterator[tuple[SchedulerLink, zmq.Socket]]:
    ctx = zmq.Context()
    inbox = ctx.socket(zmq.PULL)
    endpoint = f"ipc://{tmp_path}/inbox"
    if bind:
        inbox.bind(endpoint)
    receiver = DeltaReceiver()
    link = SchedulerLink(endpoint, receiver, **({"hwm": hwm} if hwm is not None else {}))
    try:
        yield link, inbox
    finally:
        link.close()
        receiver.close()
        inbox.close(linger=0)
        ctx.term()


def _received(inbox: zmq.Socket, timeout_ms: int = 300) -> list[object]:
    out = []
    while inbox.poll(timeout_ms):
        out.append(_DECODE.decode(inbox.recv()))
        timeout_ms = 50
    return out


@pytest.fixture
def long_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run waits for its turn's end however slow the box is (the time bound has its own test)."""
    monkeypatch.setattr(outbox, "OUTBOX_MAX_WAIT_S", 60.0)


def test_a_turns_submissions_go_out_together_at_its_end_in_order(tmp_path: Path, long_wait: None) -> None:
    with _scheduler(tmp_path) as (link, inbox):
        async def turn() -> list[int]:
            rids = [s.rid for _ in range(5) for s in link.submit(_job())]
            link.abort(rids[2])
            assert not inbox.poll(50)  # nothing sent while the turn runs
            await asyncio.sleep(0)  # the turn ends: its run goes out
            return rids

        rids = asyncio.run(turn())
        got = _received(inbox)
        assert [type(m).__name__ for m in got] == ["GenerateRequest"] * 5 + ["Abort"]
        assert [m.rid for m in got] == rids + [rids[2]]


def test_without_an_event_loop_a_message_goes_at_once(tmp_path: Path) -> None:
    with _scheduler(tmp_path) as (link, inbox):
        [stream] = link.submit(_job())
        [msg] = _received(inbox)
        assert isinstance(msg, GenerateRequest) and msg.rid == stream.rid
        link.abort(stream.rid)
        [abort] = _received(inbox)
        assert abort == Abort(stream.rid)


def test_close_sends_what_the_last_turn_queued(tmp_path: Path) -> None:
    with _scheduler(tmp_path) as (link, inbox):
        loop = asyncio.new_event_loop()
        rids: list[int] = []

        def submit_and_stop() -> None:
            rids.append(link.submit(_job())[0].rid)
            loop.stop()  # (the loop ends with this batch of callbacks: the turn-end flush never runs)

        loop.call_soon(submit_and_stop)
        loop.run_forever()
        loop.close()
        rid = rids[0]
        assert not inbox.poll(50)
        link.close()
        [msg] = _received(inbox)
        assert msg.rid == rid


def test_a_long_turn_is_sent_in_bounded_runs(tmp_path: Path, long_wait: None) -> None:
    with _scheduler(tmp_path) as (link, inbox):
        async def many() -> None:
            for _ in range(OUTBOX_MAX_QUEUED):
                link.submit(_job())
            # the bound reached: the run went out before the turn's end
            assert len(_received(inbox, 500)) == OUTBOX_MAX_QUEUED

        asyncio.run(many())


def test_a_run_waits_for_its_turns_end_a_bounded_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "OUTBOX_MAX_WAIT_S", 0.02)
    with _scheduler(tmp_path) as (link, inbox):
        async def slow_turn() -> None:
            first = link.submit(_job())[0]
            assert not inbox.poll(0)
            time.sleep(0.03)  # (the turn's other work: a wave of handlers)
            second = link.submit(_job())[0]  # the run's first waited longer than the bound: both go now
            got = _received(inbox, 1000)
            assert [m.rid for m in got] == [first.rid, second.rid]

        asyncio.run(slow_turn())


def test_a_failed_submission_leaves_nothing_at_the_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             long_wait: None) -> None:
    with _scheduler(tmp_path) as (link, inbox):
        encode = link._encoder.encode
        calls = 0

        def failing_third(message: object) -> bytes:
            nonlocal calls
            if isinstance(message, GenerateRequest):
                calls += 1
                if calls == 3:
                    raise RuntimeError("encoder broke")
            return encode(message)

        monkeypatch.setattr(link, "_encoder", type("E", (), {"encode": staticmethod(failing_third)})())

        async def turn() -> None:
            with pytest.raises(RuntimeError):
                link.submit(_job(n=4))
            await asyncio.sleep(0)

        asyncio.run(turn())
        assert _received(inbox) == []  # the two queued choices were taken back, not sent and aborted
        assert link.receiver.open_count == 0
        # without a loop the first two went at once: they are aborted
        calls = 0
        with pytest.raises(RuntimeError):
            link.submit(_job(n=4))
        got = _received(inbox)
        assert [type(m).__name__ for m in got] == ["GenerateRequest"] * 2 + ["Abort"] * 2
        assert [m.rid for m in got[2:]] == [m.rid for m in got[:2]]


def test_a_full_queue_refuses_at_once_or_ends_the_stream_with_the_reason(tmp_path: Path, long_wait: None) -> None:
    # nobody reads the inbox (not bound: zmq queues up to the send bound, 1 message here)
    with _scheduler(tmp_path, hwm=1, bind=False) as (link, _inbox):
        async def turns() -> None:
            first = link.submit(_job())[0]  # the turn's first: the socket takes it
            second = link.submit(_job())[0]  # rides on the turn's answer; the run finds the queue full
            await asyncio.sleep(0)
            assert first.finish is None
            assert second.finish is not None and second.finish.reason == "error"
            assert "queue is full" in (second.finish.message or "")
            with pytest.raises(RequestError) as refused:  # the socket is asked now: 503 at once
                link.submit(_job())
            assert refused.value.status == 503 and "queue is full" in str(refused.value)
            _inbox.bind(link_endpoint)  # the scheduler reads again: taken again
            assert _received(_inbox, 1000)
            third = link.submit(_job())[0]
            await asyncio.sleep(0)
            assert third.finish is None
            assert [m.rid for m in _received(_inbox, 1000)] == [third.rid]

        link_endpoint = f"ipc://{tmp_path}/inbox"
        asyncio.run(turns())
