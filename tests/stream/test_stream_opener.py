"""`DecodeStream.opener` and the compiled start and end of a plain stream.

- A stream a maker makes is the stream `DecodeStream(...)` makes with the same arguments: every
  field, the decoder's state, then the same deltas, counters and finish, for any prompt tail
  (whole, partial UTF-8, empty, out of the vocabulary, a tuple, an iterator), on the compiled
  class and the pure-Python fallback.
- The maker goes through the constructor wherever it must: stop rules, the window strategy, a
  subclass with its own `__init__` or `__new__`, a class off the columnar path.
- `finish` of a plain stream holding nothing (compiled) gives what the Python path gives, for any
  reason and message, leaves the decoder as its flush does, and keeps no per-reason state.
- Hostile makers, templates and calls are refused with TypeError; nothing leaks a reference.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams, DecodeStream
from detok.stream import stream_core as decode_stream_module  # (the start and end DecodeStream's base shares)
from detok.stream.byte_text import ByteTextDecoder
from detok.wire.params import EMPTY_DELTA, Delta, Finish
from detok.stream.stop_strings import StopStringMatcher
from detok.stream.strategy import prepare_decoding
from tests.stream.test_int_step import _PyDecodeStream, _fields, _params, _pool, _state

TOKENIZERS = ["qwen2", "gguf-llama-spm", "gguf-bert-bge"]
_StreamMaker = decode_stream_module._StreamMaker
compiled = pytest.mark.skipif(_StreamMaker is None, reason="the _streamcore extension is not built")


def _same_fields(s: Any) -> list[Any]:
    """`_fields`, a stop string matcher by its stop strings (it is made per stream)."""
    return [(type(v), v.firsts_text) if isinstance(v, StopStringMatcher) else v for v in _fields(s)]


def _decoder_state(s: Any) -> Any:
    dec = s._text
    if isinstance(dec, ByteTextDecoder):
        return type(dec), dec._t, dec._pending, dec._strip, dec._after_added, dec._fast
    return type(dec)


def _context_forms(ids: list[int]) -> list[Any]:
    """The same prompt as a list, a tuple and an iterator (which the maker hands to the constructor)."""
    return [list(ids), tuple(ids), iter(ids)]


@pytest.mark.parametrize("cls", [DecodeStream, _PyDecodeStream], ids=["compiled", "python"])
@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_made_stream_is_the_constructed_one(cls: type, name: str, data: st.DataObject) -> None:
    tok = stream_roster.get(name)
    pool = _pool(name)
    params = data.draw(st.sampled_from(_params(pool)))
    ignore_eos = data.draw(st.booleans())
    context = data.draw(st.lists(st.sampled_from(pool), max_size=7))
    ids = data.draw(st.lists(st.sampled_from(pool), max_size=30))
    maker = cls.opener(tok, params, ignore_eos=ignore_eos)
    made = [maker(c) for c in _context_forms(context)]
    built = cls(tok, context, params, ignore_eos=ignore_eos)
    for s in made:
        assert type(s) is cls
        assert _same_fields(s) == _same_fields(built) and _decoder_state(s) == _decoder_state(built)
    for i in ids:
        want = built.step(i)
        assert [s.step(i) for s in made] == [want] * 3
        assert [_state(s) for s in made] == [_state(built)] * 3
    reason = data.draw(st.sampled_from(["length", "abort", "stop"]))
    assert [s.finish(reason) for s in made] == [built.finish(reason)] * 3
    assert [_state(s) for s in made] == [_state(built)] * 3


@compiled
def test_the_maker_is_compiled_only_where_the_constructor_may_be_skipped() -> None:
    tok = stream_roster.get("qwen2")
    assert type(DecodeStream.opener(tok)) is _StreamMaker
    assert type(DecodeStream.opener(tok, DecodeParams(skip_special_tokens=False), ignore_eos=True)) is _StreamMaker
    for params in (DecodeParams(stop=["x"]), DecodeParams(min_tokens=1), DecodeParams(stop_token_ids=(5,)),
                   DecodeParams(include_stop_str_in_output=True)):
        assert type(DecodeStream.opener(tok, params)) is not _StreamMaker  # (the constructor's stop rules)
    assert type(DecodeStream.opener(tok, strategy="window")) is not _StreamMaker
    assert type(DecodeStream.opener(stream_roster.get("gguf-bert-bge"))) is not _StreamMaker  # (window-decoded)

    calls: list[Any] = []

    class OwnInit(DecodeStream):  # type: ignore[misc,valid-type]
        __slots__ = ()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            calls.append(args)
            super().__init__(*args, **kwargs)

    class OffColumns(DecodeStream):  # type: ignore[misc,valid-type]
        __slots__ = ()
        columnar = False

    for sub in (OwnInit, OffColumns):
        s = sub.opener(tok)([1, 2])
        assert type(s) is sub and _fields(s) == _fields(sub(tok, [1, 2]))
    assert len(calls) == 2  # OwnInit's __init__ ran for the made stream too


@compiled
def test_hostile_prompts_give_what_the_constructor_gives() -> None:
    tok = stream_roster.get("qwen2")
    maker = DecodeStream.opener(tok)
    for context in ([2**70], [-1], [tok.vocab_size], [True], [1, 2**64], [], (), [1.5], ["a"], None, 7):
        try:
            want: Any = DecodeStream(tok, context)
        except Exception as e:  # noqa: BLE001 - the constructor's own error is the expected one
            with pytest.raises(type(e)):
                maker(context)
            continue
        got = maker(context)
        assert _fields(got) == _fields(want) and _decoder_state(got) == _decoder_state(want)
        assert got.step(5) == want.step(5) and got.finish() == want.finish()


@compiled
def test_hostile_makers_templates_and_calls_are_refused() -> None:
    tok = stream_roster.get("qwen2")
    maker = DecodeStream.opener(tok)
    template = decode_stream_module._plain_template(prepare_decoding(tok), DecodeParams(), False)
    assert template is not None
    make = lambda ctx: DecodeStream(tok, ctx)  # noqa: E731
    for args in ((int, make, None), (DecodeStream, 5, None), (DecodeStream, make), (DecodeStream, make, None, 1)):
        with pytest.raises(TypeError):
            _StreamMaker(*args)

    class Open:  # a decoder that is not a __slots__ instance cannot be copied slot by slot
        pass

    bad = [template[:9], (*template, 1), (Open(), *template[1:]), (template[0], dict(enumerate(template[1])), *template[2:]),
           (*template[:4], set(template[4]), *template[5:]), (*template[:6], 0, *template[7:]),
           (*template[:7], 1, *template[8:]), (*template[:8], 0, template[9]), (*template[:9], len(template[1]) + 1),
           (*template[:9], 2**70), "not a tuple"]
    for t in bad:
        with pytest.raises((TypeError, OverflowError)):
            _StreamMaker(DecodeStream, make, t)
        with pytest.raises((TypeError, OverflowError)):
            DecodeStream(tok)._open_plain(t, [1])
    for call in (lambda: maker(), lambda: maker([1], [2]), lambda: maker(context_ids=[1])):
        with pytest.raises(TypeError):
            call()
    with pytest.raises(TypeError):
        DecodeStream(tok)._open_plain(template, iter([1]))
    assert type(_StreamMaker(DecodeStream, make, None)([1])) is DecodeStream  # (no template: the constructor)


@pytest.mark.parametrize("cls", [DecodeStream, _PyDecodeStream], ids=["compiled", "python"])
def test_a_plain_finish_is_the_python_one(cls: type) -> None:
    tok = stream_roster.get("qwen2")
    word = tok.encode(" hello")[0]
    lead = prepare_decoding(tok).tables(True, True).pieces.index(b"\xe4")  # a 3-byte character's first byte
    ended = dict(decode_stream_module._ENDED)
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {}), (("stop",), {}), (("abort", None), {}), ((), {"reason": "error"}), (("length",), {"message": "m"}),
        (("custom",), {}), ((), {"reason": "stop", "message": None}), ((3,), {}), ((["unhashable"],), {}),
    ]
    for args, kwargs in cases:
        for held in (False, True):
            a, b = cls(tok, [word]), cls(tok, [word])
            a.step(word)
            if held:
                a.step(lead)
            got = a.finish(*args, **kwargs)
            b.step(word)
            if held:
                b.step(lead)
            want = type(b)._finish_py(b, *args, **kwargs)
            assert got == want, (args, kwargs, held)
            assert a.finished and a.held_bytes == b"" and not a.holding_utf8
            assert a._text._pending == b"" and a._text._fast is False
            assert a.finish(*args, **kwargs) is EMPTY_DELTA
    assert decode_stream_module._ENDED == ended  # (a reason of its own is never kept)
    with pytest.raises(TypeError):
        cls(tok).finish("length", "m", "extra")
    with pytest.raises(TypeError):
        cls(tok).finish(reason="length", nonsense=1)


@compiled
def test_making_and_dropping_streams_leaks_no_reference() -> None:
    tok = stream_roster.get("qwen2")
    maker = DecodeStream.opener(tok)
    template = decode_stream_module._plain_template(prepare_decoding(tok), DecodeParams(), False)
    assert template is not None
    counts = lambda: [sys.getrefcount(x) for x in template[:6]]  # noqa: E731  # (the objects a stream holds)
    maker([1]).finish()  # (a first Delta made for id 1's mode, if it was not yet)
    before = counts()
    for _ in range(2000):
        s = maker([1, 2, 3])
        s.step(5)
        s.finish("stop")
        maker([]).finish("length", "m")
    del s
    assert counts() == before


def _ids(n: int) -> Iterator[int]:
    yield from range(n)


def test_a_generator_prompt_is_read_once_and_the_plain_ends_are_shared() -> None:
    tok = stream_roster.get("qwen2")
    maker = DecodeStream.opener(tok)
    assert _fields(maker(_ids(4))) == _fields(DecodeStream(tok, list(range(4))))
    word = tok.encode(" hello")[0]
    a, b = maker([word]), maker([word])
    assert a.finish("stop") is b.finish("stop") == Delta("", Finish("stop"))

