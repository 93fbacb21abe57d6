"""DeltaReceiver with a reused rid: a new stream once the earlier one finished, a replay of the
earlier request (its finish's generation already seen) dropped whole, running token counts."""

from __future__ import annotations

import pytest

from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import Finish
from detok.wire.packing import pack_u32
from detok.wire.to_frontends import DeltaBatch, RequestFinished

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rx():
    with DeltaReceiver() as rx:
        yield rx


def batch(rids, texts, offsets, finished=(), counts=None) -> DeltaBatch:
    b = DeltaBatch.from_rows(0, 0.0, rids, list(texts), offsets, finished)
    if counts is not None:
        b.num_tokens = pack_u32(counts)
    return b


def test_a_replay_of_a_finished_generation_never_reaches_the_next_request_with_its_rid(rx) -> None:
    first = rx.open(5)
    rx.dispatch(batch([5], ["old text"], [0], [RequestFinished(5, Finish("stop", "x"), 3, gen=10)]))
    assert rx.open(5) is not first  # finished (not taken yet): the rid opens a new stream
    second = rx.open(5)
    assert first.take().text == "old text"  # the earlier consumer still gets its own
    # a replacement worker replays the earlier request whole: same rows, same finish generation
    rx.dispatch(batch([5], ["old text"], [0], [RequestFinished(5, Finish("stop", "x"), 3, gen=10)]))
    assert second.take() is None
    rx.dispatch(batch([5], ["new"], [0], counts=[2]))
    rx.dispatch(batch([5], [" one"], [3], [RequestFinished(5, Finish("length"), 4, gen=11)], counts=[4]))
    delta = second.take()
    assert (delta.text, delta.finish, delta.num_tokens) == ("new one", Finish("length"), 4)
    # and the new generation's own replay is dropped the same way once it finished
    third = rx.open(5)
    rx.dispatch(batch([5], ["new one"], [0], [RequestFinished(5, Finish("length"), 4, gen=11)]))
    assert third.take() is None


def test_running_token_counts_ride_on_every_delta(rx) -> None:
    s = rx.open(1)
    rx.dispatch(batch([1, 1], ["a", ""], [0, 1], counts=[1, 3]))  # a row without text still counts
    assert s.take()[:4] == ("a", None, 3, None)
    rx.dispatch(batch([1], ["bc"], [1], [RequestFinished(1, Finish("length"), 5)], counts=[5]))
    assert s.take()[1:3] == (Finish("length"), 5)


def test_token_counts_that_do_not_fit_the_rows_are_malformed(rx) -> None:
    s = rx.open(1)
    rx.dispatch(batch([1], ["a"], [0], counts=[1, 2]))
    assert rx.malformed == 1 and s.take() is None
