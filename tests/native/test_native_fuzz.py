"""Fuzz target: hypothesis-made inputs straight into each compiled entry point of the table
(tests/native/entry_points.py): packed columns cut short, counts and lengths past the data, ids out
of range, malformed held UTF-8, huge and negative lengths, wrong types. Each call must raise a
Python exception or return what the Python twin returns; never crash. Under `make sanitize` the
same inputs run on the AddressSanitizer/UBSan build, so an out-of-bounds read or an overflow that
happens to return is a report too.

Example counts: DETOK_FUZZ_EXAMPLES per test (default 150, which make test's ci hypothesis profile
bounds at 100; 3000 with DETOK_SLOW=1, the deep profile).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.native.entry_points import NATIVE, entry_point

EXAMPLES = int(os.environ.get("DETOK_FUZZ_EXAMPLES", "3000" if os.environ.get("DETOK_SLOW") == "1" else "150"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)

# what a hostile caller's values look like at a boundary
HUGE = st.sampled_from([2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1])
NEGATIVE = st.sampled_from([-1, -2, -(2**31), -(2**63)])
ANY_INT = st.one_of(st.integers(-3, 40), HUGE, NEGATIVE)
JUNK = st.one_of(st.none(), ANY_INT, st.floats(), st.text(max_size=4), st.binary(max_size=9),
                 st.lists(st.integers(-2, 5), max_size=4), st.dictionaries(st.integers(0, 3), st.integers(0, 3), max_size=3),
                 st.just(memoryview(b"\x00" * 7)), st.just(np.zeros(3, dtype=np.float32)), st.just(object()))
RAISED = (ValueError, TypeError, OverflowError, MemoryError, IndexError, KeyError, RuntimeError, UnicodeError,
          SystemError)


def raises_or(call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, the exception): a crash is not caught here (it ends the run)."""
    try:
        return True, call()
    except RAISED as e:
        assert not isinstance(e, SystemError), f"a SystemError is a C API misuse: {e!r}"
        return False, e


def cut(data: bytes, by: int) -> bytes:
    return data[: max(0, len(data) - by)]


def u32(values: list[int]) -> bytes:
    return np.array([v % 2**32 for v in values], dtype="<u4").tobytes()


def i64(values: list[int]) -> np.ndarray:
    return np.array([max(-(2**63), min(2**63 - 1, v)) for v in values], dtype=np.int64)


@contextlib.contextmanager
def python_path(module: Any, name: str) -> Iterator[None]:
    """The module's Python twin of a compiled function, for a reference result."""
    saved = getattr(module, name)
    setattr(module, name, None)
    try:
        yield
    finally:
        setattr(module, name, saved)


# ---- every module-level entry point: wrong arity and wrong types ------------------------------
MODULE_LEVEL = [f"{m}:{e}" for m, entries in NATIVE.items() for e in entries if "." not in e]


@pytest.mark.parametrize("name", MODULE_LEVEL)
@fuzz
@given(args=st.lists(JUNK, max_size=14))
def test_junk_arguments_raise(name: str, args: list[Any]) -> None:
    if name.endswith(":configure_stream"):
        return  # (sets the module's shared objects: configured once by detok.stream.stream_core)
    raises_or(lambda: entry_point(name)(*args))


# ---- _tokenstrings.gather ---------------------------------------------------------------------
@fuzz
@given(strings=st.lists(st.binary(max_size=6), min_size=1, max_size=6), ids=st.lists(ANY_INT, max_size=8),
       edits=st.lists(st.tuples(st.integers(0, 5), st.booleans(), ANY_INT), max_size=3), short=st.integers(0, 4))
@example(strings=[b"abc"], ids=[0], edits=[(0, True, 2**63 - 1), (0, False, 2)], short=0)  # (a sum that wraps)
def test_gather(strings: list[bytes], ids: list[int], edits: list[tuple[int, bool, int]], short: int) -> None:
    from detok._native._tokenstrings import gather

    buffer = b"".join(strings)
    offsets = [sum(map(len, strings[:i])) for i in range(len(strings))]
    nbytes = [len(s) for s in strings]
    for i, is_offset, value in edits:
        (offsets if is_offset else nbytes)[i % len(strings)] = value
    buffer = cut(buffer, short)
    off, nb, idv = i64(offsets), i64(nbytes), i64(ids)
    ok, got = raises_or(lambda: gather(idv, off, nb, buffer))
    fits = all(0 <= k < len(off) and 0 <= off[k] and 0 <= nb[k] and int(off[k]) + int(nb[k]) <= len(buffer) for k in idv)
    assert ok == fits, got
    if ok:
        assert got == b"".join(buffer[int(off[k]):int(off[k]) + int(nb[k])] for k in idv)


# ---- _plainstep: split_text, group_rows, decode_utf8 -------------------------------------------
TEXTS = st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=5), max_size=6)


@fuzz
@given(texts=TEXTS, edits=st.lists(st.tuples(st.integers(0, 5), ANY_INT), max_size=2), short=st.integers(0, 3),
       bad_byte=st.one_of(st.none(), st.tuples(st.integers(0, 30), st.integers(0x80, 0xFF))), odd=st.booleans())
def test_split_text(texts: list[str], edits: list[tuple[int, int]], short: int, bad_byte: Any, odd: bool) -> None:
    from detok._native._plainstep import split_text
    from detok.wire import packing

    blob = bytearray("".join(texts).encode())
    lengths = [len(t) for t in texts]
    for i, value in edits:
        if lengths:
            lengths[i % len(lengths)] = value
    if bad_byte is not None and blob:
        blob[bad_byte[0] % len(blob)] = bad_byte[1]
    text, packed = cut(bytes(blob), short), u32(lengths) + (b"\x01" if odd else b"")
    ok, got = raises_or(lambda: split_text(text, packed))
    with python_path(packing, "_compiled_split_text"):
        ok_py, want = raises_or(lambda: packing.split_text(text, packed))
    assert ok == ok_py and (not ok or got == want), (got, want)


@fuzz
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.text(max_size=3), st.integers(0, 2**64 - 1)), max_size=6),
       column=st.integers(0, 5), short=st.integers(0, 9), length_edit=st.one_of(st.none(), st.tuples(st.integers(0, 5), ANY_INT)))
def test_group_rows(rows: list[tuple[int, str, int]], column: int, short: int, length_edit: Any) -> None:
    from detok._native._plainstep import group_rows
    from detok.wire import packing

    encoded = [t.encode("utf-8", "surrogatepass") for _, t, _ in rows]
    byte_lengths = [len(b) for b in encoded]
    if length_edit is not None and rows:
        byte_lengths[length_edit[0] % len(rows)] = length_edit[1]
    cols = [u32([t for t, _, _ in rows]), u32(byte_lengths), b"".join(encoded),
            np.array([r for _, _, r in rows], dtype="<u8").tobytes(), u32([len(t) for _, t, _ in rows]),
            u32(list(range(len(rows))))]
    cols[column] = cut(cols[column], short)
    ok, got = raises_or(lambda: group_rows(*cols))
    if ok:
        with python_path(packing, "_compiled_group_rows"):
            assert got == packing.group_rows(*cols)


@fuzz
@given(data=st.binary(max_size=24), text=st.text(max_size=6))
def test_decode_utf8(data: bytes, text: str) -> None:
    from detok._native._plainstep import decode_utf8

    for raw in (data, text.encode("utf-8", "surrogatepass") + data[:3]):  # (malformed and held sequences)
        out, used = decode_utf8(raw)
        assert 0 <= len(raw) - used <= 3 and out == raw[:used].decode("utf-8", "replace")


# ---- _chunkpush.frame_text ---------------------------------------------------------------------
@fuzz
@given(prefix=st.binary(max_size=8), text=st.text(max_size=12), suffix=st.binary(max_size=8))
def test_frame_text(prefix: bytes, text: str, suffix: bytes) -> None:
    from detok._native._chunkpush import frame_text

    ok, got = raises_or(lambda: frame_text(prefix, text, suffix))
    ok_py, body = raises_or(lambda: prefix + msgspec.json.encode(text) + suffix)
    assert ok == ok_py and (not ok or got == b"%x\r\n" % len(body) + body + b"\r\n")


# ---- _logprobrows.rows -------------------------------------------------------------------------
@fuzz
@given(counts=st.lists(ANY_INT, max_size=4), n=st.integers(0, 6), top_counts=st.lists(ANY_INT, max_size=6),
       m=st.integers(0, 6), wrong=st.one_of(st.none(), st.tuples(st.integers(1, 10), JUNK)),
       items=st.one_of(st.none(), st.tuples(st.binary(max_size=8), st.lists(st.integers(0, 9), max_size=6))))
@example(counts=[], n=0, top_counts=[], m=0, wrong=(4, {1: 2}), items=(b"", []))  # (a dict read as a list)
@example(counts=[2], n=2, top_counts=[2**62, 2**62], m=1, wrong=None, items=None)  # (a sum that overflows)
def test_logprob_rows(counts: list[int], n: int, top_counts: list[int], m: int, wrong: Any, items: Any) -> None:
    from detok._native._logprobrows import rows
    from detok.receiver.token_logprobs import TokenLogprobs, _rows_py

    tcs = (top_counts + [0] * n)[:n]
    args: list[Any] = [TokenLogprobs, list(range(len(counts))), [0] * len(counts), counts, list(range(n)),
                       [str(i) for i in range(n)], [-0.5] * n, tcs, list(range(m)), ["t"] * m, [-1.0] * m]
    if wrong is not None:  # a dict for a list (the fault the first fuzz found), a list cut short, ...
        args[wrong[0]] = wrong[1]
    extra = [] if items is None else [items[0], u32(items[1])]
    ok, got = raises_or(lambda: rows(*args, *extra))
    if ok and items is None:
        assert got == _rows_py(*args[1:])


def test_logprob_rows_survive_a_cls_that_changes_the_columns() -> None:
    """`cls` is Python code run between rows: one that empties the columns ends the call with an
    error, never a read past a list's end."""
    from detok._native._logprobrows import rows

    columns: list[list[Any]] = [[1, 2], [0, 0], [1, 1], [7, 8], ["a", "b"], [-1.0, -1.0], [0, 0], [], [], []]

    def cls(*fields: Any) -> tuple[Any, ...]:
        for c in columns:
            c.clear()
        return fields

    with pytest.raises(RuntimeError, match="changed length"):
        rows(cls, *columns)


# ---- _chatentries.render (the worker's chat items) -----------------------------------------------
@fuzz
@given(n=st.integers(0, 4), ids=st.lists(st.integers(0, 2**32 - 1), max_size=4), ks=st.lists(st.integers(-2, 21), max_size=4),
       counts=st.lists(st.one_of(st.integers(0, 3), HUGE), max_size=4), m=st.integers(0, 5),
       table=st.lists(ANY_INT, max_size=12), buffer=st.binary(max_size=24), short=st.integers(0, 2),
       json_junk=st.booleans())
def test_chat_entries_render(n: int, ids: list[int], ks: list[int], counts: list[int], m: int, table: list[int],
                             buffer: bytes, short: int, json_junk: bool) -> None:
    from detok._native._chatentries import render

    ids_a = np.array((ids + [0] * n)[:n], dtype="<u4")
    ks_a = np.array((ks + [1] * n)[:n], dtype="<i4")
    counts_a = np.array([c % 2**32 for c in (counts + [0] * n)[:n]], dtype="<u4")
    lps = np.full(n, -0.25)
    tlps = np.full(m, -1.5)
    lps_json = b"[oops]" if json_junk else msgspec.json.encode(lps.tolist())
    table_b = cut(i64(table or [0, 0, 0]).tobytes(), short * 8)
    raises_or(lambda: render(ids_a, ks_a, lps, lps_json, counts_a, np.arange(m, dtype="<u4"), tlps,
                             msgspec.json.encode(tlps.tolist()), table_b, buffer))


# ---- _chatlogprobs.render (the frontend's chat logprobs) -----------------------------------------
@fuzz
@given(ids=st.lists(st.integers(0, 50), max_size=4), counts=st.lists(ANY_INT, max_size=4), m=st.integers(0, 5),
       k=ANY_INT, wrong=st.one_of(st.none(), st.tuples(st.integers(0, 8), JUNK)), tokens=st.text(max_size=3))
@example(ids=[1, 2, 3], counts=[0, 0, 0], m=0, k=2**62, wrong=None, tokens="a")  # (sized its buffer by k: overflow)
def test_chat_logprobs_render(ids: list[int], counts: list[int], m: int, k: int, wrong: Any, tokens: str) -> None:
    from detok.streaming import chat_logprobs_json as clj
    from detok._native._chatlogprobs import render

    n = len(ids)
    lps, tlps = [-0.5] * n, [-1.0] * m
    args: list[Any] = [ids, [tokens] * n, lps, msgspec.json.encode(lps), (counts + [0] * n)[:n], list(range(m)),
                       [tokens] * m, tlps, msgspec.json.encode(tlps), k, {}, clj._fragment]
    if wrong is not None:
        args[wrong[0]] = wrong[1]
    raises_or(lambda: render(*args))


# ---- StreamTable.step_packed: the scheduler's wire columns -----------------------------------------
@pytest.fixture(scope="module")
def stream_tables() -> Iterator[list[Any]]:
    """A compiled table and a numpy one, rids 0-5 open on Qwen2 (one pair for the module: they only
    grow by what the fuzzed steps feed them, the same on both). Dropped at the module's end: a
    table's stop matchers are shared per stop list while one lives (stop_strings._SHARED), and
    other modules count them."""
    import tests.helpers.stream_roster as stream_roster
    from detok import DecodeParams
    from detok.stream.table import StreamTable

    tok = stream_roster.get("qwen2")
    tables = [StreamTable(tok, capacity=4), StreamTable(tok, capacity=4)]
    tables[1].compiled = False
    for t in tables:
        for rid in range(6):
            t.open(rid, [], DecodeParams(stop=["op"]) if rid == 5 else DecodeParams())
    yield tables
    tables.clear()
    gc.collect()


@fuzz
@given(rows=st.lists(st.tuples(st.integers(0, 7), ANY_INT, ANY_INT), max_size=6),
       ids=st.lists(st.one_of(st.integers(0, 200_000), HUGE), max_size=10),
       column=st.integers(0, 3), short=st.integers(0, 5), one_per_row=st.booleans())
def test_step_packed_wire_columns(stream_tables: list[Any], rows: list[tuple[int, int, int]], ids: list[int],
                                  column: int, short: int, one_per_row: bool) -> None:
    """Unknown rids, starts past what was sent, counts past the tokens, ids past the vocabulary,
    columns cut short: the compiled step raises or agrees with the numpy path."""
    compiled, numpy_table = stream_tables
    cols = [np.array([r for r, _, _ in rows], dtype="<u8").tobytes(), u32([s for _, s, _ in rows]),
            b"" if one_per_row else u32([c for _, _, c in rows]), u32(ids)]
    cols[column] = cut(cols[column], short)
    ok, got = raises_or(lambda: compiled.step_packed(*cols))
    ok_py, want = raises_or(lambda: numpy_table.step_packed(*cols))
    assert ok == ok_py, (got, want)
    if ok:  # (the compiled step reports unknown rids as rows, the numpy path as error finishes)
        assert got[:6] == want[:6]
        assert sorted([k for k, _, _ in got.finished] + got.unknown_rows.tolist()) == [k for k, _, _ in want.finished]


# ---- _latency.Buckets -----------------------------------------------------------------------------
@fuzz
@given(bounds=st.one_of(st.lists(st.floats(allow_nan=True), max_size=5), JUNK), values=st.lists(st.floats(), max_size=6))
def test_latency_buckets(bounds: Any, values: list[float]) -> None:
    from detok._native._latency import Buckets

    ok, buckets = raises_or(lambda: Buckets(bounds))
    if ok:
        for v in values:
            buckets.observe(v)
        counts, _total = buckets.take()
        assert sum(counts) == len(values)
