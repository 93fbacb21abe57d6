"""`_plainstep.step_packed`'s `held` argument (a held steady state's slots, detok.stream.typed_fast):
a plain row of a slot with a bytearray appends its token's bytes there and goes out empty, so the
kept bytes decode to exactly the text the plain rows would have sent (the twin of the rows' own
decode); junk in the argument is refused or ignored, never read as a buffer."""

from __future__ import annotations

import codecs

import numpy as np
import pytest

from detok.stream import packed_step
from detok.stream.table import StreamTable
from detok.wire.packing import pack_rids, pack_u32
from tests.parsing import vocabularies

pytestmark = pytest.mark.skipif(packed_step._compiled_step_packed is None, reason="the _plainstep extension is not built")
TEXT = "Paris, 北京 and 🫨 (a partial character's bytes) with plain words"


def _table(rids: list[int]) -> StreamTable:
    table = StreamTable(vocabularies.qwen(), capacity=8)
    for rid in rids:
        table.open(rid, [])
    return table


def _step(table: StreamTable, rids: list[int], ids: list[int], starts: list[int], held: object,  # type: ignore[type-arg]
          *limit: int) -> tuple:
    c_args = table._current_args()
    tokens = pack_u32(ids)
    table._cur_tokens = tokens
    return packed_step._compiled_step_packed(table._rid_map, pack_rids(rids), pack_u32(starts), b"", tokens, c_args.table,
                                             c_args.slots, c_args.stop_firsts, table._slow_row, None, True, held, *limit)


def test_kept_bytes_decode_to_the_plain_rows_text() -> None:
    tok = vocabularies.qwen()
    ids = tok.encode(TEXT)
    plain, kept = _table([1]), _table([1])
    slot = kept._slot_of[1]
    held: list[bytearray | None] = [None] * len(kept.columns)
    held[slot] = bytearray(b"<")
    texts = []
    for k, i in enumerate(ids):
        texts.append(_step(plain, [1], [i], [k], None)[0])
        out = _step(kept, [1], [i], [k], held)
        assert out[0] == b"" and out[1] == pack_u32([0]) and out[3] == pack_u32([k + 1])
    text = b"".join(texts).decode() + codecs.utf_8_decode(bytes(plain.columns.pend[1, : plain.columns.pend_len[1]]), "replace")[0]
    assert held[slot][:1] == b"<" and codecs.utf_8_decode(bytes(held[slot][1:]), "replace")[0] == text  # type: ignore[index]
    assert int(kept.columns.ntok[slot]) == len(ids) and int(kept.columns.choff[slot]) == 0
    assert kept.columns.pend_len[slot] == 0


def test_junk_in_held_is_refused_or_ignored() -> None:
    tok = vocabularies.qwen()
    i = tok.encode(" words")[0]
    table = _table([1, 2])
    for junk in ("not a list", (None,), {0: bytearray()}, 7):
        with pytest.raises(TypeError):
            _step(table, [1], [i], [0], junk)
    # a short list, and items that are not bytearrays (bytes, an int): those slots step as plain
    out = _step(table, [1, 2], [i, i], [0, 0], [b"x", 5])
    assert out[0].decode() == " words words"
    assert np.all(table.columns.ntok[[table._slot_of[1], table._slot_of[2]]] == 1)
    out = _step(table, [1, 2], [i, i], [1, 1], [])
    assert out[0].decode() == " words words"


def test_a_full_buffer_hands_the_row_to_its_stream() -> None:
    """Past `held_limit` bytes a row is not kept: it goes to its stream (here a plain request's,
    whose text comes back as the row's), the buffer as it was."""
    tok = vocabularies.qwen()
    ids = tok.encode(" plain words and more plain words")
    table = _table([1])
    slot = table._slot_of[1]
    held: list[bytearray | None] = [None] * len(table.columns)
    held[slot] = bytearray()
    limit = len(tok.decode(ids[:2]).encode())
    texts = [_step(table, [1], [i], [k], held, limit)[0] for k, i in enumerate(ids)]
    assert bytes(held[slot]) == tok.decode(ids[:2]).encode()  # type: ignore[arg-type]
    assert texts[:2] == [b"", b""] and b"".join(texts[2:]).decode() == tok.decode(ids[2:])
    assert int(table.columns.ntok[slot]) == len(ids)
