"""The chat `logprobs` bytes written directly (`chat_logprobs_json`) equal msgspec's encoding of the
Structs `logprobs_format.chat_logprobs` builds, byte for byte (floats in msgspec's own format,
-inf / NaN / +inf / below -9999 clamped, RawToken strings, repeated and cached token strings, the
sampled token among its alternatives or not, any `top_logprobs`), and a body's joined object equals
the object of all its entries at once. Both paths: the compiled writer (`_chatlogprobs.c`) and the
fallback without a compiler (the Structs encoded, wrapped and joined the same way); hostile columns
get a clear error from either."""

from __future__ import annotations

import os

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.streaming import chat_logprobs_json as cj
from detok.streaming.chat_logprobs_json import chat_logprobs_json, joined_chat_logprobs
from detok.streaming.logprobs_format import chat_logprobs
from detok.receiver.token_logprobs import TokenLogprobs

from tests.frontend.test_logprobs_format import SAMPLE, entries

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "60"))

_piece = st.one_of(
    st.sampled_from([b"Hello", b" the", b"\n", b'"', b"\\", b"<|im_end|>", "北".encode(), b"\x00"]),  # repeats: cached
    st.text(min_size=0, max_size=4).map(str.encode),
    st.binary(min_size=1, max_size=3),  # partial and invalid UTF-8: RawToken
)
_logprob = st.one_of(
    st.floats(-30, 0),
    st.floats(allow_nan=True, allow_infinity=True),  # anything a peer could send, -0.0 and -1e300 included
    st.sampled_from([float("-inf"), float("inf"), float("nan"), -9999.0, -9999.5, 1e-7, -5.08e-06]),
)
_alt = st.tuples(st.integers(0, 8), _piece, _logprob)
_row = st.tuples(st.integers(0, 8), _piece, _logprob, st.lists(_alt, max_size=7))


def reference(lp: TokenLogprobs, k: int) -> bytes:
    return msgspec.json.encode(chat_logprobs(lp, k))


@pytest.fixture(params=["compiled", "python"], autouse=True)
def writer(request, monkeypatch):
    """Every test runs on both paths."""
    if request.param == "compiled":
        if cj._render is None:
            pytest.fail("the compiled writer is not built (detok/_native/_chatlogprobs.c)")
    else:
        monkeypatch.setattr(cj, "_render", None)
    return request.param


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(rows=st.lists(_row, max_size=20), k=st.integers(0, 21))
def test_written_bytes_equal_the_structs_encoding(rows, k) -> None:
    lp = entries(rows)
    got = msgspec.json.encode(chat_logprobs_json(lp, k))
    assert got == reference(lp, k)
    assert msgspec.json.encode(chat_logprobs_json(lp, k)) == got  # again, from the cached fragments


@settings(max_examples=EXAMPLES, deadline=None)
@given(rows=st.lists(_row, max_size=20), cuts=st.lists(st.integers(0, 20), max_size=5), k=st.integers(0, 6))
def test_a_body_of_joined_chunks_equals_the_whole(rows, cuts, k) -> None:
    whole = entries(rows)
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    parts = [chat_logprobs_json(entries(rows[a:b]), k) for a, b in zip(bounds[:-1], bounds[1:])]
    assert msgspec.json.encode(joined_chat_logprobs(parts)) == reference(whole, k)


def test_sample_inside_a_chunk_is_valid_json_with_the_expected_values() -> None:
    body = msgspec.json.decode(msgspec.json.encode({"logprobs": chat_logprobs_json(SAMPLE, 2)}))
    c = body["logprobs"]["content"]
    assert [t["token"] for t in c[1]["top_logprobs"]] == ["bytes:\\x20\\xe5\\x8c", "bytes:\\x20\\xe4"]
    assert c[3]["logprob"] == -9999.0 and c[3]["top_logprobs"][1]["logprob"] == -0.2
    assert msgspec.json.encode(joined_chat_logprobs([])) == b'{"content":[]}'


def test_fragments_stay_bounded_and_clear() -> None:
    cj._fragments.clear()
    for i in range(cj.FRAGMENTS_MAX + 10):
        cj._fragment(i, f"t{i}")
    assert len(cj._fragments) <= cj.FRAGMENTS_MAX
    lp = TokenLogprobs(0, [1], ["x"], [-1.0], [1], [2], ["y"], [-2.0])
    assert msgspec.json.encode(chat_logprobs_json(lp, 2)) == reference(lp, 2)


def test_a_cached_id_with_another_string_is_written_with_the_string_that_came(writer) -> None:
    """The cache is keyed by id and checked against the string: a worker's string always wins
    (a different string for the id, or the same spelling as a RawToken)."""
    cj._fragments.clear()
    first = entries([(7, b"abc", -1.0, [(8, b"x", -2.0)])])
    chat_logprobs_json(first, 2)
    for other in (entries([(7, b"abd", -1.0, [(8, b"y", -2.0)])]), entries([(7, b"\xe4", -1.0, [(8, b"\x97", -2.0)])])):
        assert msgspec.json.encode(chat_logprobs_json(other, 2)) == reference(other, 2)
    spelled = TokenLogprobs(0, [7], ["bytes:\\xe4"], [-1.0], [0], [], [], [])  # a str spelled like a RawToken
    assert msgspec.json.encode(chat_logprobs_json(spelled, 1)) == reference(spelled, 1)
    if writer == "compiled":  # a damaged entry is made again, not written (no crash, no bad JSON)
        cj._fragments[7] = ("abc", str, "not bytes", b"")
        assert msgspec.json.encode(chat_logprobs_json(first, 2)) == reference(first, 2)


@pytest.mark.parametrize("lp", [
    TokenLogprobs(0, [1, 2], ["a"], [-1.0], [0], [], [], []),  # columns of different lengths
    TokenLogprobs(0, [1], ["a"], [-1.0], [3], [2], ["b"], [-2.0]),  # counts past the alternatives
    TokenLogprobs(0, [1], ["a"], [-1.0, -2.0], [0], [], [], []),  # more floats than tokens
    TokenLogprobs(0, [1], ["a"], [-1.0], [1], [2], ["b"], []),  # an alternative without its float
])
def test_columns_that_do_not_fit_are_refused(lp) -> None:
    with pytest.raises((ValueError, IndexError)):
        chat_logprobs_json(lp, 5)


def test_bad_arguments_to_the_compiled_writer(writer) -> None:
    if writer != "compiled":
        return
    render = cj._render
    ok = ([1], ["a"], [-1.0], b"[-1.0]", [0], [], [], [], b"[]", 1, {}, cj._fragment)
    assert render(*ok) == (b'{"content":[{"token":"a","logprob":-1.0,"bytes":[97],'
                           b'"top_logprobs":[{"token":"a","logprob":-1.0,"bytes":[97]}]}]}')
    for i, bad in [(0, (1,)), (2, [-1.0, -2.0]), (2, ["x"]), (3, "[-1.0]"), (3, b"-1.0"), (3, b"[]"), (3, b"[-1.0,]"),
                   (4, [-1]), (4, [1]), (10, []), (11, lambda tid, t: b"x"), (9, "1")]:
        args = list(ok)
        args[i] = bad
        with pytest.raises((TypeError, ValueError)):
            render(*args)
    with pytest.raises(TypeError):
        render(*ok[:11])


def test_the_compiled_writer_runs_no_python_code_of_the_entries(writer) -> None:
    """Subclasses whose __float__ / __hash__ / __eq__ could change the cache mid-write are refused
    (floats, ids) or compared as plain str (tokens), so no fragment it holds can be freed."""
    if writer != "compiled":
        return

    class Clearing(str):
        def __eq__(self, other):
            cj._fragments.clear()
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    class Float(float):
        pass

    class Int(int):
        pass

    cj._fragments.clear()
    lp = TokenLogprobs(0, [3], ["x"], [-1.0], [2], [4, 5], ["y", "z"], [-2.0, -3.0])
    chat_logprobs_json(lp, 3)
    # a cached entry of the subclass: compared as str, its __eq__ never runs (the cache stays)
    cj._fragments[3] = (Clearing("x"),) + cj._fragments[3][1:]
    cj._fragments[3] = (cj._fragments[3][0], Clearing, *cj._fragments[3][2:])
    tricky = TokenLogprobs(0, [3], [Clearing("x")], [-1.0], [2], [4, 5], ["y", "z"], [-2.0, -3.0])
    assert msgspec.json.encode(chat_logprobs_json(tricky, 3)) == reference(lp, 3)
    assert len(cj._fragments) == 3
    with pytest.raises(TypeError):  # a str subclass msgspec cannot write: a clear error
        chat_logprobs_json(TokenLogprobs(0, [9], [Clearing("q")], [-1.0], [0], [], [], []), 3)
    for bad in (TokenLogprobs(0, [3], ["x"], [Float(-1.0)], [0], [], [], []),
                TokenLogprobs(0, [Int(3)], ["x"], [-1.0], [0], [], [], []),
                TokenLogprobs(0, [3], ["x"], [-1.0], [1], [True], ["y"], [-2.0]),
                TokenLogprobs(0, [3], [b"x"], [-1.0], [0], [], [], [])):
        with pytest.raises(TypeError):
            chat_logprobs_json(bad, 3)
