"""DeltaReceiver with kind rows (`DeltaBatch.kinds`: typed requests' rows from the workers' compiled
path): each goes to its stream of typed output, replays are cut by offset as typed rows are, and a
message whose kinds do not fit its rows, or arguments before any call, are refused, never guessed."""

from __future__ import annotations

import pytest

from detok.parsing.types import KIND_ARGUMENTS, KIND_CONTENT, KIND_REASONING, ToolCallDelta
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import Finish
from detok.wire.to_frontends import CallFragment, DeltaBatch, RequestFinished, TypedRow

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rx():
    with DeltaReceiver() as rx:
        yield rx


def batch(rids, texts, offsets, kinds, typed=None, finished=()) -> DeltaBatch:
    b = DeltaBatch.from_rows(0, 0.0, rids, list(texts), offsets, finished)
    b.kinds, b.typed = bytes(kinds), typed
    return b


def test_kind_rows_build_reasoning_content_and_arguments_and_replays_are_cut(rx) -> None:
    s = rx.open(3)
    rx.dispatch(batch([3], ["Let me"], [0], [KIND_REASONING]))
    rx.dispatch(batch([3], ["me think"], [4], [KIND_REASONING]))  # a replay overlapping by 2 chars
    rx.dispatch(batch([3], ["Answer"], [0], [KIND_CONTENT],
                      typed=[TypedRow(3, calls=[CallFragment(0, "call_x", "f", '{"a": "', 0)])]))
    rx.dispatch(batch([3, 3], ["", "x y"], [99, 7], [KIND_ARGUMENTS, KIND_ARGUMENTS]))  # an empty row says nothing
    rx.dispatch(batch([], [], [], [], typed=[TypedRow(3, calls=[CallFragment(0, None, None, '"}', 10)])],
                      finished=[RequestFinished(3, Finish("stop"), 9, calls=1)]))
    got = s.take()
    assert (got.reasoning, got.text) == ("Let me think", "Answer")
    assert got.tool_calls == (ToolCallDelta(0, "call_x", "f", '{"a": "x y"}'),)
    assert got.finish == Finish("stop") and rx.gaps == 0


def test_kinds_that_do_not_fit_the_rows_are_malformed(rx) -> None:
    s = rx.open(1)
    rx.dispatch(batch([1, 1], ["a", "b"], [0, 1], [KIND_CONTENT]))
    assert rx.malformed == 1 and s.take() is None


def test_arguments_before_any_call_are_dropped_and_counted(rx) -> None:
    s = rx.open(2)
    rx.dispatch(batch([2], ["orphan"], [0], [KIND_ARGUMENTS]))
    assert s.take() is None and rx.gaps == 1
