"""Logprob entries at the receiver: carried on RequestDelta, de-duplicated by token index after
a replay (as text is by char offset), gaps counted, nothing for requests without logprobs, bad
columns dropped with the message."""

from __future__ import annotations

import numpy as np
import pytest

from detok.wire.packing import join_texts, pack_rids, pack_u32
from detok.wire.to_frontends import DeltaBatch, DeltaLogprobs, RequestFinished
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import Finish
from detok.receiver.token_logprobs import RawToken, TokenLogprobs, split_logprobs, token_bytes
from detok.worker.logprobs import join_parts, openai_token


def lp_part(rows: list[tuple[int, int, list[int]]], k: int = 1) -> DeltaLogprobs:
    """Entries as a worker packs them: (rid, first token index, ids) per row; token strings are
    `openai_token` of made-up bytes (id 0xE5.. are partial characters), k alternatives each."""
    def string(i: int) -> tuple[str, bool]:
        return openai_token(bytes([i]) if 0x80 <= i < 0x100 else f"t{i}".encode())

    ids = [i for _, _, row in rows for i in row]
    tops = [i + 1000 for i in ids for _ in range(k)]
    strings = [string(i) for i in ids] + [string(i) for i in tops]
    text, lengths = join_texts([s for s, _ in strings])
    return DeltaLogprobs(
        pack_rids([r for r, _, _ in rows]), pack_u32([f for _, f, _ in rows]), pack_u32([len(x) for _, _, x in rows]),
        pack_u32(ids), np.float32([-0.25 * (i % 7) for i in ids]).tobytes(), pack_u32([k] * len(ids)),
        pack_u32(tops), np.float32([-3.0] * len(tops)).tobytes(), text, lengths,
        pack_u32([j for j, (_, raw) in enumerate(strings) if raw]),
    )


def batch(texts: list[tuple[int, str, int]], lp: DeltaLogprobs | None, finished=()) -> DeltaBatch:
    b = DeltaBatch.from_rows(0, 0.0, [r for r, _, _ in texts], [t for _, t, _ in texts], [o for _, _, o in texts], finished)
    b.logprobs = lp
    return b


@pytest.fixture
def rx():
    receiver = DeltaReceiver()
    yield receiver
    receiver.close()


def take_all(stream) -> tuple[str, list[int], list[str]]:
    text, ids, tokens = "", [], []
    while (d := stream.take()) is not None:
        text += d.text
        if d.logprobs is not None:
            assert d.logprobs.first == len(ids), "runs handed out follow each other"
            ids += d.logprobs.token_ids
            tokens += d.logprobs.tokens
    return text, ids, tokens


def test_entries_travel_on_request_delta_and_replays_are_dropped(rx) -> None:
    s1, s2 = rx.open(1), rx.open(2)
    rx.dispatch(batch([(1, "ab", 0)], lp_part([(1, 0, [10, 11])])))
    rx.dispatch(batch([(1, "ab", 0)], lp_part([(1, 0, [10, 11])])))  # the same message again
    rx.dispatch(batch([(1, "bcd", 1)], lp_part([(1, 1, [11, 12, 13])])))  # overlapping replay
    rx.dispatch(batch([(2, "x", 0)], None))
    text, ids, _ = take_all(s1)
    assert (text, ids) == ("abcd", [10, 11, 12, 13])
    assert take_all(s2) == ("x", [], [])  # no logprobs: nothing carried
    assert rx.logprob_gaps == 0


def test_entries_of_a_token_with_no_text_make_a_delta(rx) -> None:
    """A token that is part of a character has no text yet, but its entry is news."""
    s = rx.open(3)
    rx.dispatch(batch([(3, "", 0)], lp_part([(3, 0, [0xE5])])))
    d = s.take()
    assert d is not None and d.text == "" and d.logprobs.tokens == ["bytes:\\xe5"]
    assert type(d.logprobs.tokens[0]) is RawToken and token_bytes(d.logprobs.tokens[0]) == b"\xe5"


def test_a_slow_consumer_gets_joined_runs_and_the_finish_after_the_entries(rx) -> None:
    s = rx.open(4)
    rx.dispatch(batch([(4, "a", 0)], lp_part([(4, 0, [1])], k=2)))
    rx.dispatch(batch([(4, "b", 1)], lp_part([(4, 1, [2, 3])], k=2), [RequestFinished(4, Finish("length"), 3)]))
    d = s.take()
    assert d.text == "ab" and d.finish.reason == "length" and d.num_tokens == 3
    assert d.logprobs.token_ids == [1, 2, 3] and d.logprobs.top_ids == [1001, 1001, 1002, 1002, 1003, 1003]
    assert s.take() is None


def test_a_gap_is_kept_and_counted(rx) -> None:
    s = rx.open(5)
    rx.dispatch(batch([(5, "a", 0)], lp_part([(5, 0, [1])])))
    rx.dispatch(batch([(5, "b", 1)], lp_part([(5, 3, [4])])))
    assert take_all(s)[1] == [1, 4] and rx.logprob_gaps == 1


def test_several_requests_in_one_message_and_unknown_rids_ignored(rx) -> None:
    a, b = rx.open(6), rx.open(7)
    part = join_parts([lp_part([(6, 0, [0xF0, 0x9F]), (99, 0, [5])]), lp_part([(7, 0, [0xAB, 8])])])
    rx.dispatch(batch([(6, "", 0), (7, "x", 0)], part))
    assert take_all(a)[2] == ["bytes:\\xf0", "bytes:\\x9f"]
    _, ids, tokens = take_all(b)
    assert ids == [0xAB, 8] and tokens == ["bytes:\\xab", "t8"]
    assert [type(t) for t in tokens] == [RawToken, str]  # join_parts renumbered the raw indices


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: setattr(p, "counts", pack_u32([3])),  # more entries than sent
        lambda p: setattr(p, "top_counts", pack_u32([2])),  # alternatives do not add up
        lambda p: setattr(p, "raw", pack_u32([9])),  # a bytes: index past the strings
        lambda p: setattr(p, "raw", pack_u32([1])),  # a string that is not a bytes: form
        lambda p: setattr(p, "lengths", pack_u32([1, 1])),  # lengths do not fit the text
        lambda p: setattr(p, "rids", b"\0" * 3),  # not a multiple of 8
    ],
)
def test_bad_columns_drop_the_message_and_count_it(rx, damage) -> None:
    s = rx.open(8)
    part = lp_part([(8, 0, [1])])
    damage(part)
    rx.dispatch(batch([(8, "a", 0)], part))
    assert rx.malformed == 1 and s.take() is None


def test_split_and_tail_and_concat() -> None:
    [(rid, run, first, _)] = split_logprobs(lp_part([(9, 4, [1, 0xE5, 3])], k=2))
    assert rid == 9 and (run.first, run.end, len(run)) == (4, 7, 3) and first == 4
    tail = run.tail(6)
    assert tail.token_ids == [3] and tail.top_ids == [1003, 1003] and tail.first == 6
    assert run.tail(2) is run
    joined = TokenLogprobs.concat([run.tail(4), tail])
    assert joined.first == 4 and joined.token_ids == [1, 0xE5, 3, 3]


@pytest.mark.parametrize("text", ["bytes:", "bytes:\\x", "bytes:\\xzz", "bytes:/xe5", "byte:\\xe5", "bytes:\\xe5x"])
def test_raw_token_parse_rejects_other_strings(text: str) -> None:
    if text == "bytes:":
        assert RawToken.parse(text).data == b""
        return
    with pytest.raises(ValueError):
        RawToken.parse(text)


# ---- the compiled cut per entry-row == the Python one --------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from detok.receiver import token_logprobs as tl  # noqa: E402

_entry = st.tuples(st.integers(0, 300), st.integers(0, 4))  # (id, alternatives)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 9), st.lists(_entry, max_size=5)), max_size=12))
def test_compiled_cut_equals_the_python_one(rows) -> None:
    if tl._rows is None:
        pytest.fail("the compiled cut is not built (detok/_native/_logprobrows.c)")
    rids = [r for r, _, _ in rows]
    firsts = [f for _, f, _ in rows]
    counts = [len(e) for _, _, e in rows]
    ids = [i for _, _, e in rows for i, _ in e]
    tcs = [c for _, _, e in rows for _, c in e]
    tids = [i * 7 + j for _, _, e in rows for i, c in e for j in range(c)]
    cols = (ids, [f"t{i}" for i in ids], [-0.5 * i for i in ids], tcs, tids, [f"a{i}" for i in tids],
            [-1.0 - i for i in tids])
    assert tl._rows(TokenLogprobs, rids, firsts, counts, *cols) == tl._rows_py(rids, firsts, counts, *cols)


def test_compiled_cut_refuses_columns_that_do_not_fit() -> None:
    if tl._rows is None:
        pytest.fail("the compiled cut is not built (detok/_native/_logprobrows.c)")
    ok = ([5], [0], [1], [7], ["x"], [-1.0], [1], [8], ["y"], [-2.0])
    assert tl._rows(TokenLogprobs, *ok) == [(5, TokenLogprobs(0, [7], ["x"], [-1.0], [1], [8], ["y"], [-2.0]), 0, None)]
    for i, bad in [(2, [2]), (2, [-1]), (6, [2]), (6, [-1]), (3, [7, 8]), (9, []), (0, (5,))]:
        args = list(ok)
        args[i] = bad
        with pytest.raises((ValueError, TypeError)):
            tl._rows(TokenLogprobs, *args)
    with pytest.raises(TypeError):
        tl._rows(TokenLogprobs, *ok[:9])
