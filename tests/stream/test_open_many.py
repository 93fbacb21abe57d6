"""`StreamTable.open_many` / `finish_many` (a batch of requests' set-up and end, one compiled call for
the plain ones) against a loop of `open` / `finish` on a twin table: for any batch - duplicate rids
(within the batch or already open), rids that are not wire rids, prompts the compiled set-up leaves
to Python (partial characters, ids out of the vocabulary, no ids, tuples, iterators), parameters with
stop ids or strings, more requests than free slots - the same outcome (what each returns, the
exception and where), the same columns, slots, free list and rid map, and then the same steps and
ends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams
from detok.stream import table as table_module
from detok.stream.table import DuplicateRequest, StreamTable
from tests.stream.test_plain_open import _pool, _state

pytestmark = pytest.mark.skipif(table_module._compiled_step_packed is None, reason="the _plainstep extension is not built")

TOKENIZERS = ("qwen2", "mistral-spm-v1")
PARAMS = (DecodeParams(), DecodeParams(skip_special_tokens=False), DecodeParams(stop_token_ids=[13]),
          DecodeParams(stop=["##"]), DecodeParams(min_tokens=2))

_rid = st.one_of(st.integers(0, 12), st.sampled_from([-3, 2**64, 2**64 - 1]))
_picks = st.lists(st.integers(-3, 80), max_size=7)  # pool indexes; negative: raw ids past the vocabulary
_shape = st.sampled_from(["list", "list", "list", "tuple", "iter"])


def _ids(pool: list[int], picks: list[int], shape: str) -> Any:
    ids = [pool[i % len(pool)] if i >= 0 else 10**6 - i for i in picks]
    return tuple(ids) if shape == "tuple" else iter(ids) if shape == "iter" else ids


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except DuplicateRequest as e:
        return "duplicate", e.args


def _opened(table: StreamTable, rids: list[Any], contexts: list[Any], p: DecodeParams, ignore_eos: bool, tag: int,
            many: bool) -> tuple[str, Any]:
    if many:
        kind, got = _outcome(lambda: table.open_many(rids, contexts, p, ignore_eos, tag))
        return kind, [x is None for x in got] if kind == "ok" else got

    def loop() -> list[bool]:
        return [table.open(rid, ctx, p, ignore_eos, tag) is None for rid, ctx in zip(rids, contexts)]

    return _outcome(loop)


def _same_tables(a: StreamTable, b: StreamTable) -> None:
    assert a._slot_of == b._slot_of and a._free == b._free and set(a._deferred) == set(b._deferred)
    assert set(a._streams) == set(b._streams)
    for rid in a._slot_of:
        assert _state(a, rid) == _state(b, rid), rid
        if type(rid) is int and 0 <= rid < 2**64:
            assert a._rid_map.get(rid) == b._rid_map.get(rid) == a._slot_of[rid]
    assert len(a._rid_map) == len(b._rid_map)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(TOKENIZERS),
    batches=st.lists(
        st.tuples(st.lists(st.tuples(_rid, _picks, _shape), max_size=7), st.integers(0, len(PARAMS) - 1), st.booleans(),
                  st.integers(0, 5), st.lists(st.integers(0, 80), max_size=3), st.lists(_rid, max_size=5)),
        min_size=1, max_size=4),
)
def test_a_batch_opens_steps_and_ends_as_one_request_at_a_time(name: str, batches: list[Any]) -> None:
    tok = stream_roster.get(name)
    pool = _pool(name)
    many, one = StreamTable(tok, capacity=4), StreamTable(tok, capacity=4)  # (small: batches outgrow it)
    stepped: dict[int, int] = {}  # rid -> ids stepped (a finished rid opened again starts over)
    for requests, p, ignore_eos, tag, out, ending in batches:
        rids = [r for r, _, _ in requests]
        # each table gets its own prompt objects (an iterator is used up by the first)
        got = [_opened(t, rids, [_ids(pool, picks, shape) for _, picks, shape in requests], PARAMS[p], ignore_eos, tag,
                       t is many) for t in (many, one)]
        assert got[0] == got[1]
        _same_tables(many, one)
        live = [rid for rid in many._slot_of if type(rid) is int and 0 <= rid < 2**64]
        for i in out:  # a step of every live wire rid, each one id
            starts = np.array([stepped.get(r, 0) for r in live], "<u4").tobytes()
            ids = np.full(len(live), pool[i % len(pool)] % tok.vocab_size, "<u4").tobytes()
            step = [t.step_packed(np.array(live, "<u8").tobytes(), starts, b"", ids, row_texts=True) for t in (many, one)]
            assert step[0].texts == step[1].texts and step[0][:7] == step[1][:7]
            stepped.update((r, stepped.get(r, 0) + 1) for r in live)
        ends = [many.finish_many(ending, "length"), [one.finish(rid, "length") for rid in ending]]
        assert ends[0] == ends[1]
        for rid in ending:
            stepped.pop(rid, None)
        _same_tables(many, one)
    everything = list(one._slot_of)
    assert many.finish_many(everything, "abort") == [one.finish(rid, "abort") for rid in everything]
    assert len(many) == len(many._rid_map) == 0


def test_a_batch_of_plain_requests_is_set_up_without_streams() -> None:
    tok = stream_roster.get("qwen2")
    table = StreamTable(tok, capacity=2)
    prompts = [tok.encode(f"Question {i}: why?") for i in range(50)]
    assert table.open_many(list(range(50)), prompts) == [None] * 50
    assert not table._streams and len(table._deferred) == 50 and len(table._rid_map) == 50
    ends = table.finish_many(list(range(50)), "length")
    assert {end[3] for end in ends} == {table_module.Finish("length")} and len(table) == 0


def test_bad_batches_are_refused() -> None:
    tok = stream_roster.get("qwen2")
    table = StreamTable(tok)
    with pytest.raises(ValueError, match="2 rids but 1 prompts"):
        table.open_many([1, 2], [[9707]])
    table.open_many([1], [[9707]])
    opener = table._current_args().opener
    with pytest.raises(TypeError):
        opener.open_many([2], [[9707]], 0, 0, 5, 0, True, (), table._slot_of, table._deferred, None)  # free: not a list
    with pytest.raises(ValueError):
        opener.open_many([2], [[9707]], 0, 99, 5, 0, True, table._free, table._slot_of, table._deferred, None)  # no such mode
    with pytest.raises(ValueError):
        opener.open_many([2], [[9707]], 0, 0, 5, 0, True, [10**6], table._slot_of, table._deferred, None)  # slot past the columns
    with pytest.raises(ValueError):
        opener.finish_many([1], 0, [], table._slot_of, table._deferred, {}, table._free, bytearray(1), None)  # firsts_len of another size
    assert table._slot_of == {1: table._rid_map.get(1)}  # nothing changed by the refused calls
