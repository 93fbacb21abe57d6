"""A plain request's compiled set-up and end (`PlainOpener`, `_plainstep.c`) against the Python
path of `StreamTable.open` / `finish`: any prompt tail - partial characters, special and added
tokens, ids out of the vocabulary, negative or huge ids, no ids - leaves the same columns, the same
choice between the columns and a stream, and the same text; the rid map forgets a finished rid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams
from detok.stream import mode_tables, packed_step, prepare_decoding
from detok.stream import table as table_module
from detok.stream.table import StreamTable

pytestmark = pytest.mark.skipif(table_module._compiled_step_packed is None, reason="the _plainstep extension is not built")

# byte-level BPE (a byte per id for partial characters), SentencePiece (a leading space to strip)
TOKENIZERS = ("qwen2", "mistral-spm-v1")
PARAMS = (DecodeParams(), DecodeParams(skip_special_tokens=False),
          DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=False))
_COLUMNS = ("pend_len", "mode", "expect", "ntok", "choff", "eos_stops", "tag")
_pools: dict[str, list[int]] = {}


def _pool(name: str) -> list[int]:
    """Ids worth drawing: a multilingual text's (partial characters on their own), every special
    id, byte tokens, and ids past the vocabulary."""
    if name not in _pools:
        tok = stream_roster.get(name)
        ids = tok.encode(" Hello 北京欢迎你 🫨👍🏽 สวัสดี\n")
        pieces = prepare_decoding(tok).tables(True, True).pieces
        single_bytes = [pieces.index(bytes([b])) for b in "👋北".encode() if bytes([b]) in pieces]  # (byte-level only)
        _pools[name] = sorted(set(ids)) + sorted(tok.special_ids)[:8] + single_bytes * 3 + [
            3, 4, 200, 255, tok.vocab_size - 1, tok.vocab_size, tok.vocab_size + 7]
    return _pools[name]


def _pair(name: str) -> tuple[StreamTable, StreamTable]:
    tok = stream_roster.get(name)
    compiled, python = StreamTable(tok, capacity=4), StreamTable(tok, capacity=4)
    python.compiled = False
    return compiled, python


def _state(table: StreamTable, rid: int) -> tuple[object, ...]:
    slot = table._slot_of[rid]
    n = int(table.columns.pend_len[slot])
    return (rid in table._deferred, bytes(table.columns.pend[slot, :n]), *(getattr(table.columns, c)[slot].item() for c in _COLUMNS))


_context = st.one_of(
    st.lists(st.integers(0, 80), max_size=9),  # indexes into the pool
    st.lists(st.sampled_from([-1, 2**31, 2**63, 2**64 + 3]), min_size=1, max_size=2).map(lambda v: [-x - 1 for x in v]),
)


@pytest.mark.ci_examples(20)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(TOKENIZERS),
    requests=st.lists(st.tuples(_context, st.integers(0, 2), st.booleans(), st.lists(st.integers(0, 40), max_size=6)),
                      min_size=1, max_size=8),
)
def test_compiled_open_and_finish_match_the_python_path(
    name: str, requests: list[tuple[list[int], int, bool, list[int]]]
) -> None:
    pool = _pool(name)

    def ids(picks: list[int]) -> list[int]:  # pool indexes; negative entries are raw ids (out of range)
        return [pool[i % len(pool)] if i >= 0 else -i - 1 for i in picks]

    compiled, python = _pair(name)
    for rid, (picks, p, ignore_eos, _) in enumerate(requests):
        for t in (compiled, python):
            t.open(rid, ids(picks), PARAMS[p], ignore_eos=ignore_eos, tag=rid + 7)
        assert _state(compiled, rid) == _state(python, rid), (rid, ids(picks))
    for rid, (_, _, _, out) in enumerate(requests):  # each request's ids, one step each, then the end
        out_ids = [i for i in ids(out) if i < stream_roster.get(name).vocab_size]
        texts = []
        for t in (compiled, python):
            parts = [t.step([rid], [k], [1], [i]).texts[0] for k, i in enumerate(out_ids)]
            finish = t.finish(rid, "length")
            texts.append(("".join(parts) + finish[0], finish[1:3]))
            assert rid not in t and t._rid_map.get(rid) == 0
        assert texts[0] == texts[1]


def test_a_prompt_tail_ending_in_part_of_a_character_is_held_in_the_columns() -> None:
    """The compiled set-up keeps the bytes the Python path keeps, the table stays on the compiled
    path for them (no stream), and the first output id completes the character."""
    tok = stream_roster.get("qwen2")
    wave = "👋".encode()
    pieces = prepare_decoding(tok).tables(True, True).pieces
    byte_ids = [pieces.index(bytes([b])) for b in wave]  # one id per byte of the emoji
    compiled, _ = _pair("qwen2")
    compiled.open(1, [tok.encode("Hi")[0], *byte_ids[:3]], DecodeParams())
    slot = compiled._slot_of[1]
    assert 1 in compiled._deferred and bytes(compiled.columns.pend[slot, : compiled.columns.pend_len[slot]]) == wave[:3]
    out = compiled.step_packed(np.array([1], "<u8").tobytes(), b"\0\0\0\0", b"", np.array(byte_ids[3:], "<u4").tobytes())
    assert out.text.decode() == "👋" and 1 not in compiled._streams


def test_a_rid_the_map_cannot_hold_and_an_iterator_tail_take_the_python_path() -> None:
    compiled, python = _pair("qwen2")
    for t in (compiled, python):
        t.open(-5, [9707], DecodeParams())  # not a wire rid
        t.open(2**64, [9707], DecodeParams())
        t.open(3, iter([9707, 11]), DecodeParams())  # neither a list nor a tuple
        t.open(4, (9707, 11), DecodeParams())
    assert 4 in compiled._deferred
    for rid in (-5, 2**64, 3, 4):
        assert _state(compiled, rid) == _state(python, rid)
        assert compiled.finish(rid, "abort")[:3] == python.finish(rid, "abort")[:3]
    assert len(compiled._rid_map) == 0


def test_the_opener_refuses_out_of_range_arguments() -> None:
    compiled, _ = _pair("qwen2")
    compiled.open(1, [9707], DecodeParams())
    opener = compiled._current_args().opener
    with pytest.raises(ValueError):
        opener.open(2, 10**6, 0, [9707], 5, 0, True)  # slot past the columns
    with pytest.raises(ValueError):
        opener.open(2, 2, 99, [9707], 5, 0, True)  # no such mode
    with pytest.raises(TypeError):
        opener.open(2, 2, 0, iter([9707]), 5, 0, True)  # neither a list nor a tuple
    with pytest.raises(ValueError):
        opener.finish(1, 0)  # slot 0 is never given out
    with pytest.raises(OverflowError):
        opener.open(-1, 2, 0, [9707], 5, 0, True)


def test_ids_without_a_byte_entry_in_the_mode_are_left_to_the_python_path() -> None:
    """A mode spans the tokenizer's vocab_size ids; those past its byte table have no byte entry,
    and a tail with one is refused (the stream reports it out of the vocabulary)."""
    tok = stream_roster.get("qwen2")
    tables = prepare_decoding(tok).tables(True, True)
    n = len(tables.pieces)
    modes = mode_tables.ModeTables(n + 3, np.zeros(n + 3, dtype=bool))
    mode = modes.mode_of(tables)
    slots = 8
    columns = (np.zeros((slots, 4), np.uint8), np.zeros(slots, np.uint8), *(np.zeros(slots, np.int64) for _ in range(3)),
               np.zeros(slots, bool), np.zeros(slots, np.int64), np.zeros(slots, np.uint32))
    rid_map = table_module._RidMap()
    opener = packed_step._PlainOpener(rid_map, (modes.entries, modes.utf8, n + 3), columns, np.zeros(1, bool))
    assert not opener.open(5, 1, mode, [100, n + 1], 5, 0, True) and rid_map.get(5) == 0
    assert opener.open(5, 1, mode, [100, 101], 5, 9, True) and rid_map.get(5) == 1 and columns[-1][1] == 9
