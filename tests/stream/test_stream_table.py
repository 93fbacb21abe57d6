"""The worker's batched path: replays, gaps, unknown rids, duplicates, growth - on the compiled
step and on the numpy path alike - and the two paths against each other."""

from __future__ import annotations

import numpy as np
import pytest

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams, Finish
from detok.wire.packing import pack_rids, pack_u32
from detok.stream import mode_tables
from detok.stream import table as table_module
from detok.stream.table import StreamTable

_COMPILED = table_module._compiled_step_packed is not None


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def step_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both paths (tables made in the test take the module's choice)."""
    if request.param == "compiled" and not _COMPILED:
        pytest.skip("the _plainstep extension is not built")
    if request.param == "numpy":
        monkeypatch.setattr(table_module, "_compiled_step_packed", None)
    return request.param


def _table(n: int, capacity: int = 4) -> StreamTable:
    table = StreamTable(stream_roster.get("qwen2"), capacity=capacity)
    for rid in range(n):
        table.open(rid, [], DecodeParams(), ignore_eos=True)
    return table


def test_grows_past_capacity_and_steps_every_row() -> None:
    tok = stream_roster.get("qwen2")
    ids = tok.encode(" hello world 北京 🫨")
    table = _table(50, capacity=4)
    got = {rid: "" for rid in range(50)}
    for t, i in enumerate(ids):
        res = table.step(list(range(50)), np.full(50, t), np.ones(50, np.int64), np.full(50, i, np.uint32))
        for rid, text in zip(range(50), res.texts):
            got[rid] += text
    assert set(got.values()) == {tok.decode(ids)}


def test_replayed_rows_are_skipped_and_gaps_are_errors() -> None:
    tok = stream_roster.get("qwen2")
    a, b, c = tok.encode(" one two three")
    table = _table(2)
    assert table.step([0, 1], [0, 0], [1, 1], [a, a]).texts == [" one", " one"]
    # rid 0 replays token 0 then sends token 1 in the same row; rid 1 skips ahead (token 2 missing)
    res = table.step([0, 1], [0, 2], [2, 1], [a, b, c])
    assert res.texts[0] == " two" and res.offsets[0] == 4 and res.num_tokens[0] == 2
    assert res.finishes[1] is not None and res.finishes[1].reason == "error" and "expected start 1" in res.finishes[1].message
    assert 1 not in table
    # the same rid twice in one batch, same start: one token, not two (small and vectorized batches)
    res = table.step([0, 0], [2, 2], [1, 1], [c, c])
    assert "".join(res.texts) == " three" and res.num_tokens == [3, 3]
    fillers = list(range(10, 26))
    for rid in fillers:
        table.open(rid, [], DecodeParams(), ignore_eos=True)
    res = table.step([0, 0, *fillers], [3, 3] + [0] * 16, [1] * 18, [a, a] + [a] * 16)
    assert res.texts[:2] in ([" one", ""], ["", " one"]) and res.num_tokens[:2] == [4, 4]


def test_unknown_rid_gets_an_error_finish_and_others_go_on() -> None:
    tok = stream_roster.get("qwen2")
    (x,) = tok.encode(" x")
    table = _table(1)
    res = table.step([0, 99], [0, 0], [1, 1], [x, x])
    assert res.texts == [" x", ""]
    assert res.finishes[0] is None
    assert res.finishes[1] == Finish("error", None, "unknown request id 99 (not registered, or already finished)")


def test_stop_ids_of_a_stream_are_honoured_on_the_batched_path() -> None:
    tok = stream_roster.get("qwen2")
    ids = tok.encode(" a b c d")
    table = StreamTable(tok)
    table.open("plain", [], DecodeParams(), ignore_eos=True)
    table.open("stops", [], DecodeParams(stop_token_ids=[ids[2]]), ignore_eos=True)
    finishes = []
    for t, i in enumerate(ids):
        rids = [r for r in ("plain", "stops") if r in table]
        res = table.step(rids, [t] * len(rids), [1] * len(rids), [i] * len(rids))
        finishes += [(r, f) for r, f in zip(rids, res.finishes) if f is not None]
    assert finishes == [("stops", Finish("stop", ids[2]))]


def test_integer_rid_arrays_find_their_slots_by_binary_search() -> None:
    tok = stream_roster.get("qwen2")
    ids = tok.encode(" a b")
    table = StreamTable(tok, capacity=2)
    rids = [5, 2**63 + 7, 3, *range(100, 120)]  # more rows than a small batch: the vectorized path
    for rid in rids:
        table.open(rid, [], DecodeParams(), ignore_eos=True)
    table.close(3)
    table.open(11, [], DecodeParams(), ignore_eos=True)
    batch = np.array([2**63 + 7, 5, 11, 3, *range(100, 120)], dtype=np.uint64)
    n = len(batch)
    res = table.step(batch, np.zeros(n, np.uint32), np.ones(n, np.uint32), np.full(n, ids[0], np.uint32))
    assert res.texts == [" a", " a", " a", ""] + [" a"] * 20
    assert res.finishes[3] == Finish("error", None, "unknown request id 3 (not registered, or already finished)")


def test_a_rid_closed_and_registered_again_between_steps_finds_its_new_stream() -> None:
    tok = stream_roster.get("qwen2")
    a, b = tok.encode(" one two")
    table = StreamTable(tok)
    others = list(range(100, 116))  # enough rows for the vectorized path
    for rid in (5, 6, *others):
        table.open(rid, [], DecodeParams(), ignore_eos=True)
    table.step(np.array([5, 6, *others], dtype=np.uint64), [0] * 18, [1] * 18, [a] * 18)
    table.close(5)
    table.open(5, [], DecodeParams(), ignore_eos=True)  # reused: starts again at token 0
    table.open(7, [], DecodeParams(), ignore_eos=True)
    table.close(7)  # opened and closed between two steps
    res = table.step(np.array([5, 6, 7, *others], dtype=np.uint64), [0, 1, 0] + [1] * 16, [1] * 19, [b] * 19)
    assert res.texts[:3] == [" two", " two", ""] and res.offsets[:3] == [0, 4, 0]
    assert res.finishes[2] is not None and res.finishes[2].reason == "error"


def test_step_packed_gives_the_wire_columns_of_step() -> None:
    tok = stream_roster.get("qwen2")
    ids = tok.encode(" 北京 🫨 x")
    tables = [_table(3), _table(3)]
    for t, i in enumerate(ids):
        rids, starts = [0, 2, 1], [t, t, t]
        res = tables[0].step(rids, starts, [1, 1, 1], [i, i, i])
        packed = tables[1].step_packed(pack_rids(rids), pack_u32(starts), b"", pack_u32([i, i, i]))
        assert packed.unpacked() == res
        assert packed.text == "".join(res.texts).encode()
    with pytest.raises(ValueError):
        tables[1].step_packed(pack_rids([0, 1]), pack_u32([0, 0]), pack_u32([2, 2]), pack_u32([ids[0]] * 3))
    # the rejected batch changed nothing: both tables go on alike
    packed = tables[1].step_packed(pack_rids([0]), pack_u32([len(ids)]), b"", pack_u32([ids[-1]]))
    assert packed.unpacked() == tables[0].step([0], [len(ids)], [1], [ids[-1]])


def test_mode_tables_span_the_vocab_and_ids_past_the_byte_table_are_never_plain() -> None:
    """A tokenizer whose vocab_size is larger than its byte table: each mode still spans exactly
    vocab ids (mode m's id t at m * vocab + t), and the missing ids go to their stream (which
    reports them out of the vocabulary) on both paths."""
    tok = stream_roster.get("qwen2")
    plan = table_module.prepare_decoding(tok)
    tables = plan.tables(True, True)
    n = len(tables.pieces)
    modes = mode_tables.ModeTables(n + 3, np.zeros(n + 3, dtype=bool))
    assert modes.mode_of(tables) == 0 and modes.mode_of(plan.tables(False, False)) == 1
    assert len(modes.entries) == len(modes.texts) == len(modes.byte_ok) == 2 * (n + 3)
    assert modes.restricted and not modes.byte_ok[n : n + 3].any() and not modes.byte_ok[2 * n + 3 :].any()
    assert not (modes.entries["flags"][n : n + 3] & mode_tables._T_BYTE_OK).any()
    assert modes.byte_ok[: n].all() and bytes(modes.entries["inline"][n + 3 + 100]) == tables.pieces[100]
