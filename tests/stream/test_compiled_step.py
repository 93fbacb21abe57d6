"""The compiled step (`_plainstep.c`) against the numpy/Python path and against CPython's UTF-8
decoder: random batches give the same results and state on both paths."""

from __future__ import annotations

import codecs
import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams
from detok.stream import prepare_decoding
from detok.stream import table as table_module
from detok.stream.table import StreamTable

pytestmark = pytest.mark.skipif(table_module._compiled_step_packed is None, reason="the _plainstep extension is not built")


_TOK_IDS = None


def _pool_of_ids() -> list[int]:
    global _TOK_IDS
    if _TOK_IDS is None:
        tok = stream_roster.get("qwen2")
        ids = tok.encode("Hello 北京欢迎你 🫨👍🏽👨‍👩‍👧 สวัสดี नमस्ते stop here" * 2)
        _TOK_IDS = sorted(set(ids)) + sorted(tok.special_ids) + [tok.token_to_id("ÿ"), tok.vocab_size + 5]
    return _TOK_IDS


_row = st.tuples(st.integers(0, 13), st.integers(-1, 2), st.lists(st.integers(0, 10_000), min_size=0, max_size=3))


def _tables_with_requests(tok: object, n: int, params: list[DecodeParams]) -> list[StreamTable]:
    """`n` tables, the last on the numpy path, each with rids 0-11 open (prompt tails from the id
    pool, the parameters cycled); rids 12 and 13 are never registered."""
    pool = _pool_of_ids()
    tables = [StreamTable(tok, capacity=4) for _ in range(n)]
    tables[-1].compiled = False
    for t in tables:
        for rid in range(12):
            t.open(rid, pool[rid : rid + 2], params[rid % len(params)])
    return tables


@pytest.mark.ci_examples(15)
@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(_row, min_size=0, max_size=24), min_size=1, max_size=12))
def test_compiled_and_numpy_paths_agree_row_for_row(batches: list[list[tuple[int, int, list[int]]]]) -> None:
    """Random batches - repeated rids, replays and gaps, several ids per row, unknown rids,
    out-of-vocabulary ids, stop ids and stop strings, held UTF-8 bytes - give identical results
    and state on the compiled step and the numpy path."""
    tok = stream_roster.get("qwen2")
    pool = _pool_of_ids()
    eos = sorted(tok.eos_token_ids)
    params = [
        DecodeParams(),
        DecodeParams(skip_special_tokens=False),
        DecodeParams(stop=["stop"], stop_token_ids=pool[3:4]),
        DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=False),
    ]
    tables = [StreamTable(tok, capacity=4), StreamTable(tok, capacity=4)]
    tables[1].compiled = False
    for t in tables:
        for rid in range(12):  # rids 12 and 13 are never registered
            t.open(rid, pool[rid : rid + 2], params[rid % 4], ignore_eos=rid % 3 == 0)
    sent = dict.fromkeys(range(14), 0)
    for batch in batches:
        rids, starts, counts, tokens = [], [], [], []
        for rid, skew, picks in batch:
            rids.append(rid)
            starts.append(max(0, sent[rid] + skew - 1 if skew < 0 else sent[rid] + (skew == 2)))
            chosen = [pool[p % len(pool)] if p % 50 else eos[p % len(eos)] for p in picks]
            counts.append(len(chosen))
            tokens += chosen
            sent[rid] = starts[-1] + len(chosen)
        args = (np.array(rids, dtype=np.uint64), starts, counts, np.array(tokens, dtype=np.int64))
        a, b = tables[0].step(*args), tables[1].step(*args)
        assert a == b
    for rid in range(14):
        assert tables[0].finish(rid, "length") == tables[1].finish(rid, "length")



_TRICKY_BYTES = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF]


def test_compiled_utf8_decoder_is_cpythons_on_every_short_sequence() -> None:
    """The compiled step decodes held bytes itself: U+FFFD per maximal invalid subpart, an
    incomplete tail kept (a truncated surrogate too), exactly as codecs.utf_8_decode(final=False).
    Every sequence of one or two bytes, and of three and four of _TRICKY_BYTES (a byte of each
    lead class and the ends of each continuation range: every rule of one character)."""
    from detok._native._plainstep import decode_utf8

    sequences = itertools.chain(*(itertools.product(range(256), repeat=k) for k in (1, 2)),
                                *(itertools.product(_TRICKY_BYTES, repeat=k) for k in (3, 4)))
    wrong = [data for data in map(bytes, sequences) if decode_utf8(data) != codecs.utf_8_decode(data, "replace", False)]
    assert not wrong, wrong[:5]


@pytest.mark.ci_examples(300)  # longer runs of characters: every one-character rule is checked above
@settings(max_examples=3000, deadline=None)
@given(data=st.lists(st.one_of(st.sampled_from(_TRICKY_BYTES), st.integers(0, 255)), max_size=12).map(bytes))
def test_compiled_utf8_decoder_is_cpythons_incremental_replace_decoder(data: bytes) -> None:
    """Any bytes, several characters long: the same as codecs.utf_8_decode(final=False)."""
    from detok._native._plainstep import decode_utf8

    assert decode_utf8(data) == codecs.utf_8_decode(data, "replace", False)


_row = st.tuples(st.integers(0, 3), st.text(max_size=4), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(_row, max_size=40))
def test_group_rows_compiled_and_numpy_agree_and_keep_row_order(rows: list[tuple[int, str, int, int]]) -> None:
    """The worker's per-frontend split of a step: each tag's rows in order, nothing lost."""
    from detok.wire import packing
    from detok.wire.packing import pack_rids, pack_u32

    tags = pack_u32([t for t, _, _, _ in rows])
    texts = [x for _, x, _, _ in rows]
    cols = (tags, pack_u32([len(x.encode()) for x in texts]), "".join(texts).encode(), pack_rids([r for _, _, r, _ in rows]),
            pack_u32([len(x) for x in texts]), pack_u32([o for _, _, _, o in rows]))
    compiled = packing.group_rows(*cols)
    saved, packing._compiled_group_rows = packing._compiled_group_rows, None
    try:
        assert packing.group_rows(*cols) == compiled
    finally:
        packing._compiled_group_rows = saved
    seen = list(dict.fromkeys(t for t, _, _, _ in rows))
    assert [g[0] for g in compiled] == seen
    for tag, rids, text, lengths, offsets in compiled:
        mine = [row for row in rows if row[0] == tag]
        assert packing.unpack_rids(rids).tolist() == [r for _, _, r, _ in mine]
        assert packing.split_text(text, lengths) == [x for _, x, _, _ in mine]
        assert packing.unpack_u32(offsets).tolist() == [o for _, _, _, o in mine]


@pytest.mark.ci_examples(15)
@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60)), max_size=12), min_size=1, max_size=8))
def test_row_texts_are_the_blob_cut_per_row_and_a_whole_token_is_its_own_str(batches: list[list[tuple[int, int]]]) -> None:
    """`step_packed(row_texts=True)`: each row's str is the row's cut of the packed text (held
    bytes, partial characters, special tokens, unknown rids alike), and a row of one whole token
    with nothing held is the vocabulary's own str object (no str made per row)."""
    from detok.wire.packing import pack_rids, pack_u32, split_text

    tok = stream_roster.get("qwen2")
    pool = [i for i in _pool_of_ids() if i < tok.vocab_size]
    table = StreamTable(tok, capacity=4)
    for rid in range(5):  # rid 5 is never registered
        table.open(rid, [], DecodeParams(skip_special_tokens=rid % 2 == 0), ignore_eos=True)
    sent = dict.fromkeys(range(6), 0)
    shared = 0
    for batch in batches:
        rows = list({rid: pick for rid, pick in batch}.items())  # one row per rid
        ids = [pool[pick % len(pool)] for _, pick in rows]
        held = {rid: table.columns.pend_len[table._slot_of[rid]] if rid in table._slot_of else 0 for rid, _ in rows}
        out = table.step_packed(pack_rids([r for r, _ in rows]), pack_u32([sent[r] for r, _ in rows]), b"", pack_u32(ids),
                                row_texts=True)
        assert out.texts == split_text(out.text, out.lengths)
        for (rid, _), i, text in zip(rows, ids, out.texts):
            sent[rid] += 1
            mode_text = table._tables.texts[table.columns.mode[table._slot_of[rid]] * table._vocab + i] if rid in table._slot_of else None
            if mode_text and not held[rid] and text == mode_text:
                assert text is mode_text
                shared += 1
    assume(shared > 0)


@pytest.mark.ci_examples(12)
@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 13), st.integers(0, 10_000)), min_size=32, max_size=90),
                        min_size=1, max_size=4))
def test_batches_of_one_id_per_row_agree_where_the_step_prefetches(batches: list[list[tuple[int, int]]]) -> None:
    """One id per row and at least PREFETCH_MIN rows: the compiled step looks every row's slot up
    first (and prefetches from it), then goes on with those slots only until a row goes to its
    stream (which may end a request: a stop id, a stop string). Repeated rids in a batch, requests
    that end mid-batch and unknown rids give the numpy path's results."""
    tok = stream_roster.get("qwen2")
    pool = _pool_of_ids()
    eos = sorted(tok.eos_token_ids)
    params = [DecodeParams(), DecodeParams(stop_token_ids=pool[3:4]), DecodeParams(stop=["stop"]),
              DecodeParams(skip_special_tokens=False)]
    tables = _tables_with_requests(tok, 2, params)
    sent = dict.fromkeys(range(14), 0)
    for batch in batches:
        starts = []
        for rid, _ in batch:
            starts.append(sent[rid])
            sent[rid] += 1
        columns = (np.array([rid for rid, _ in batch], "<u8").tobytes(), np.array(starts, "<u4").tobytes(), b"",
                   np.array([pool[p % len(pool)] if p % 40 else eos[p % len(eos)] for _, p in batch], "<u4").tobytes())
        a, b = (t.step_packed(*columns).unpacked() for t in tables)
        assert a == b
    for rid in range(14):
        assert tables[0].finish(rid, "length") == tables[1].finish(rid, "length")


_VOCAB_STRS: dict[tuple[int, ...], set[int]] = {}


def _vocab_strs(tok: object, params: list[DecodeParams]) -> set[int]:
    """The ids of the strs of a whole token's text in these parameters' decode modes (their byte
    tables', which every StreamTable's modes hold: `ModeBlock`), once per process; a str that is
    not one of them was made in the step."""
    plan = prepare_decoding(tok)  # type: ignore[arg-type]
    modes = {id(t): t for p in params if (t := plan.tables(p.skip_special_tokens, p.spaces_between_special_tokens))}
    key = tuple(sorted(modes))
    own = _VOCAB_STRS.get(key)
    if own is None:
        own = _VOCAB_STRS[key] = {id(x) for t in modes.values() for x in t.texts if x}
    return own


@pytest.mark.ci_examples(12)
@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 13), st.integers(0, 10_000), st.integers(1, 3)), max_size=60),
                        min_size=1, max_size=6),
       one_each=st.booleans())
def test_rows_strs_alone_are_the_packed_texts_without_the_blob(batches: list[list[tuple[int, int, int]]],
                                                               one_each: bool) -> None:
    """`step_packed(row_texts=True, packed_text=False)`: the same strs (a whole token's own object
    alike), and every column the same, as with the packed text, whose blob alone is left out
    (b""); on the compiled step (one id a row: the prefetching loop from 32 rows on; several) and
    the numpy path. Held bytes, stop strings, special tokens with spaces, stop ids and unknown rids
    included; the streams' state after each step is the same."""
    from detok.wire.packing import pack_rids, pack_u32, split_text

    tok = stream_roster.get("qwen2")
    pool = _pool_of_ids()
    eos = sorted(tok.eos_token_ids)
    params = [DecodeParams(), DecodeParams(stop=["stop", "欢"]), DecodeParams(skip_special_tokens=False),
              DecodeParams(stop_token_ids=pool[3:4]), DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=False)]
    tables = _tables_with_requests(tok, 3, params)  # packed text, strs alone, strs alone (numpy)
    sent = dict.fromkeys(range(14), 0)
    for batch in batches:
        rows = batch if not one_each else [(rid, pick, 1) for rid, pick, _ in batch]
        ids = [pool[(pick + j) % len(pool)] if (pick + j) % 40 else eos[pick % len(eos)]
               for _, pick, n in rows for j in range(n)]
        starts = []
        for rid, _, n in rows:
            starts.append(sent[rid])
            sent[rid] += n
        columns = (pack_rids([rid for rid, _, _ in rows]), pack_u32(starts),
                   b"" if one_each else pack_u32([n for _, _, n in rows]), pack_u32(ids))
        whole, alone, alone_numpy = (t.step_packed(*columns, row_texts=True, packed_text=i == 0) for i, t in enumerate(tables))
        assert alone.text == b"" == alone_numpy.text and whole.texts == split_text(whole.text, whole.lengths)
        assert alone.texts == whole.texts == alone_numpy.texts
        own = _vocab_strs(tok, params)
        assert [id(x) in own for x in alone.texts] == [id(x) in own for x in whole.texts]
        assert alone._replace(text=whole.text, texts=None, unknown_rows=None, unknown_rids=None) == whole._replace(
            texts=None, unknown_rows=None, unknown_rids=None)
        assert alone.unknown_rids.tolist() == whole.unknown_rids.tolist()
        assert alone.unpacked() == whole.unpacked() == alone_numpy.unpacked()
    for rid in range(14):
        assert tables[0].finish(rid, "length") == tables[1].finish(rid, "length") == tables[2].finish(rid, "length")
