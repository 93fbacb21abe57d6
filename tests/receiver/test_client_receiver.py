"""DeltaReceiver: replay de-duplication by char offset, one finish per rid, coalescing for slow
consumers, the bulk callback, async iterators on uvloop, and bad bytes on its socket."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
import zmq

from detok.wire.codec import new_encoder
from detok.wire.to_frontends import DeltaBatch, RequestFinished
from detok.receiver.receiver import DeltaReceiver, RequestDelta
from detok.wire.params import Finish

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rx():
    rx = DeltaReceiver()
    yield rx
    rx.close()


def deltas(rids, texts, offsets, finished=()) -> DeltaBatch:
    return DeltaBatch.from_rows(0, 0.0, rids, list(texts), offsets, finished)


def test_replayed_text_is_cut_and_slow_consumers_get_it_joined(rx) -> None:
    s = rx.open(1)
    rx.dispatch(deltas([1], ["Hello"], [0]))
    rx.dispatch(deltas([1], [", wor"], [5]))
    rx.dispatch(deltas([1], ["Hello, world"], [0]))  # a replay from the start: only "ld" is new
    rx.dispatch(deltas([1], ["world"], [7]))  # fully seen
    assert s.take() == RequestDelta("Hello, world")
    assert s.take() is None
    rx.dispatch(deltas([1], ["!"], [12], [RequestFinished(1, Finish("length"), 4)]))
    rx.dispatch(deltas([], [], [], [RequestFinished(1, Finish("error", None, "late"), 9)]))  # first finish wins
    assert s.take() == RequestDelta("!", Finish("length"), 4)
    assert s.done and s.take() is None and rx.open_count == 0
    assert rx.gaps == 0


def test_a_gap_is_kept_and_counted(rx) -> None:
    s = rx.open(2)
    rx.dispatch(deltas([2, 2], ["ab", "ef"], [0, 4]))
    assert s.take() == RequestDelta("abef")
    assert rx.gaps == 1


def test_bulk_callback_sees_every_batch_and_unopened_rids_are_ignored(rx) -> None:
    seen = []
    rx.on_batch = seen.append
    batch = deltas([5, 6], ["x", "y"], [0, 0])
    rx.dispatch(batch)
    assert seen == [batch] and rx.open_count == 0
    s = rx.open(6)
    rx.discard(6)
    rx.dispatch(deltas([6], ["z"], [1]))
    assert s.take() is None


def test_async_iteration_on_uvloop_over_a_socket(rx) -> None:
    async def main() -> list[RequestDelta]:
        await rx.start()
        stream = rx.open(9)
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 1000)
        push.connect(rx.endpoint)
        enc = new_encoder()

        async def produce() -> None:
            push.send(b"\x00garbage")  # dropped and counted, the receiver goes on
            for i, word in enumerate(["a", "b", "c"]):
                push.send(enc.encode(deltas([9], [word], [i])))
                await asyncio.sleep(0.01)
            push.send(enc.encode(deltas([], [], [], [RequestFinished(9, Finish("stop", "END"), 3)])))

        producer = asyncio.create_task(produce())
        got = [d async for d in stream]
        await producer
        push.close()
        return got

    got = uvloop.run(asyncio.wait_for(main(), 10))
    assert "".join(d.text for d in got) == "abc"
    assert got[-1].finish == Finish("stop", "END") and got[-1].num_tokens == 3
    assert all(d.finish is None for d in got[:-1])
    assert rx.malformed == 1


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_the_reader_takes_what_was_queued_before_it_past_a_turns_bound_and_a_raising_callback(loop_kind) -> None:
    """Messages queued before start() (zmq's FD signals changes only: a poll_blocking before it has
    taken the signal), more of them than one turn takes (_DRAIN_MAX), and a bulk callback that
    raises on one: every batch is still dispatched,
    the error goes to the loop's handler, and close() with the loop running leaves it quiet."""
    from detok.receiver import receiver as receiver_module

    rx = DeltaReceiver()
    seen: list[int] = []
    errors: list[object] = []
    n = receiver_module._DRAIN_MAX * 2 + 7

    def on_batch(batch: DeltaBatch) -> None:
        seen.append(int(batch.sent_at))
        if batch.sent_at == receiver_module._DRAIN_MAX + 3:  # (read by the loop's reader)
            raise RuntimeError("a consumer's bug")

    rx.on_batch = on_batch
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    push.connect(rx.endpoint)
    enc = new_encoder()
    for step in range(n):
        push.send(enc.encode(DeltaBatch.from_rows(0, float(step), [], [], [])))

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
        await asyncio.sleep(0.2)  # (all of them queued in the socket before the reader exists)
        assert rx.poll_blocking(1.0) == receiver_module._DRAIN_MAX  # (a first bound's worth taken without a loop)
        await rx.start()
        for _ in range(200):
            if len(seen) == n:
                break
            await asyncio.sleep(0.01)
        rx.close()
        push.send(enc.encode(DeltaBatch.from_rows(0, float(n), [], [], [])))  # (nobody reads it)
        await asyncio.sleep(0.05)

    try:
        (uvloop.run if loop_kind == "uvloop" else asyncio.run)(asyncio.wait_for(main(), 10))
    finally:
        push.close()
        rx.close()
    assert seen == list(range(n))
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
