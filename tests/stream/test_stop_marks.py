"""Stop rules on the compiled path (`detok.stream.stop_marks`): requests with stop ids, visible stop
ids, `min_tokens`, `include_stop_str_in_output` or stop strings are set up in the columns like
plain ones, and only a row carrying a marked or end-of-sequence id, or text that may begin one of
its stop strings (or any row while one is partly matched), goes to a stream. Random requests and batches
give the same rows and finishes as a table that makes every stream at `open` (the Python path),
on the compiled step and on the numpy one; a mark of another request's only costs a slow row; the
marks come back to zero when the requests end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams, Finish
from detok.stream import table as table_module
from detok.stream.table import StreamTable

_TEXT = " one two three. four, five! six 北京 🫨 seven; eight"

_piece = st.integers(0, len(_TEXT) - 1).flatmap(lambda i: st.integers(1, 4).map(lambda n: _TEXT[i : i + n]))
_stops = st.one_of(
    st.just([]),
    st.lists(st.one_of(_piece, st.text(min_size=1, max_size=3)), min_size=1, max_size=3),  # mostly pieces of the text
    st.just([chr(0x4E00 + k) + "x" for k in range(12)]),  # first characters past FIRSTS_BYTES: the stream's path
)
_request = st.tuples(
    st.lists(st.integers(0, 11), max_size=2),  # stop ids: pool indexes (10, 11: end-of-sequence ids)
    st.lists(st.integers(0, 11), max_size=1),  # visible stop ids
    st.integers(0, 4),  # min_tokens
    st.booleans(),  # include_stop_str_in_output
    st.booleans(),  # ignore_eos
    _stops,
)


def _pool(tok: Any) -> list[int]:
    ids = list(dict.fromkeys(tok.encode(_TEXT)))
    return ids[:10] + sorted(tok.eos_token_ids)[:2] + ids[10:]


def _params(pool: list[int], stop: list[int], visible: list[int], min_tokens: int, include: bool,
            strings: list[str]) -> DecodeParams:
    return DecodeParams(stop_token_ids=tuple(pool[i] for i in stop), visible_stop_token_ids=tuple(
        pool[i] for i in visible if i not in stop), min_tokens=min_tokens, include_stop_str_in_output=include,
        stop=tuple(strings))


@pytest.mark.ci_examples(15)
@pytest.mark.parametrize("name", ["qwen2", "mistral-spm-v1"])
@settings(max_examples=40, deadline=None)
@given(requests=st.lists(_request, min_size=1, max_size=6),
       steps=st.lists(st.lists(st.integers(0, 40), min_size=6, max_size=6), min_size=1, max_size=12))
def test_requests_with_stop_ids_step_as_streams_made_at_open(name: str, requests: list[Any], steps: list[list[int]]) -> None:
    tok = stream_roster.get(name)
    pool = _pool(tok)
    compiled, numpy_path, eager = (StreamTable(tok, capacity=4) for _ in range(3))
    numpy_path.compiled = False
    eager._plain_mode = lambda *mode: None  # type: ignore[method-assign]  # every request gets its stream at open
    if table_module._compiled_step_packed is None:
        compiled.compiled = False
    for t in (compiled, numpy_path, eager):
        for rid, (stop, visible, min_tokens, include, ignore_eos, strings) in enumerate(requests):
            t.open(rid, [pool[rid]], _params(pool, stop, visible, min_tokens, include, strings), ignore_eos=ignore_eos)
    wide = sum(len(strings) == 12 for *_, strings in requests)  # (their first characters do not fit a slot)
    assert not eager._deferred and len(compiled._deferred) == len(requests) - wide
    sent = [0] * len(requests)
    for picks in steps:
        rids = [r for r in range(len(requests)) if r in compiled]
        ids = [pool[picks[r] % len(pool)] for r in rids]
        args = (np.array(rids, dtype=np.uint64), [sent[r] for r in rids], [1] * len(rids), np.array(ids, dtype=np.int64))
        results = [t.step(*args) for t in (compiled, numpy_path, eager)]
        assert results[0] == results[1] == results[2], (rids, ids)
        for r in rids:
            sent[r] += 1
    for rid in range(len(requests)):
        ends = [t.finish(rid, "length") for t in (compiled, numpy_path, eager)]
        assert ends[0] == ends[1] == ends[2]
    for t in (compiled, numpy_path, eager):
        assert not t.stops.by_rid and not t.stops.marks.any()  # every mark given back


def test_a_stop_id_ends_its_request_and_only_costs_the_others_a_slow_row() -> None:
    """A request that stops on '.' and one that does not, on the same ids: the first stops at
    the '.', the second decodes it as text; both were set up without a stream."""
    tok = stream_roster.get("qwen2")
    ids = tok.encode(" end. more")
    dot = next(i for i in ids if tok.decode([i]) == ".")
    table = StreamTable(tok)
    table.open(1, [], DecodeParams(stop_token_ids=(dot,)), ignore_eos=True)
    table.open(2, [], DecodeParams(), ignore_eos=True)
    assert set(table._deferred) == {1, 2} and table.stops.marks[dot] == 1
    texts = {1: "", 2: ""}
    finishes = {}
    for k, i in enumerate(ids):
        rids = [r for r in (1, 2) if r in table]
        res = table.step(rids, [k] * len(rids), [1] * len(rids), [i] * len(rids))
        for r, text, finish in zip(rids, res.texts, res.finishes):
            texts[r] += text
            if finish is not None:
                finishes[r] = finish
    assert texts[2] == " end. more" and texts[1] == " end" and finishes == {1: Finish("stop", dot)}
    assert 1 not in table.stops.by_rid and table.stops.marks[dot] == 0
    assert table.finish(2, "length")[3] == Finish("length")


def test_stop_ids_outside_the_vocabulary_are_not_marked() -> None:
    tok = stream_roster.get("qwen2")
    table = StreamTable(tok)
    table.open(1, [], DecodeParams(stop_token_ids=(tok.vocab_size + 9, 2**40)))
    assert 1 in table._deferred and not table.stops.by_rid and table.columns.eos_stops[table._slot_of[1]]
    table.close(1)
    assert not table.stops.marks.any()


def test_remembered_first_characters_are_bounded() -> None:
    """Stop lists' first characters are remembered for at most _FIRSTS_CACHE lists, none longer
    than _FIRSTS_CACHED_CHARS: a sender of endless distinct or huge stop lists holds no memory."""
    from detok.stream import stop_marks

    table = StreamTable(stream_roster.get("qwen2"))
    for k in range(stop_marks._FIRSTS_CACHE + 10):
        table.open(k, [], DecodeParams(stop=(f"s{k}",)))
        table.close(k)
        assert len(table.stops._firsts_cache) <= stop_marks._FIRSTS_CACHE
    huge = ("x" * (stop_marks._FIRSTS_CACHED_CHARS + 1),)
    table.open(-1, [], DecodeParams(stop=huge))
    assert huge not in table.stops._firsts_cache and -1 in table._deferred
