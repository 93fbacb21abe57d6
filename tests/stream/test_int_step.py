"""`DecodeStream.step(int)` and the cheap set-up paths against the general Python paths.

- `step(id)` (compiled one-id step), `step([id])`, the pure-Python fallback class (the module
  loaded without the extension) and the Python step path (`_step_py`, the general path)
  give the same deltas, counters, held bytes and finishes, on real tokenizers, for any ids
  (partial UTF-8, specials, EOS, stop ids and strings, min_tokens, out of the vocabulary).
- A prompt tail that ends in whole characters is not decoded: the decoder's state is the one a
  push of the tail gives, and `context_held` (the table's deferred set-up) agrees with it.
- A StreamTable whose plain requests are deferred (no stream until needed) steps and finishes
  exactly as one that makes every stream at `open`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams, DecodeStream
from detok.stream import decode_stream as decode_stream_module
from detok.stream.byte_text import ByteTextDecoder, OutOfVocabulary, context_held
from detok.stream.strategy import prepare_decoding
from detok.stream.table import StreamTable

# byte-level BPE, SentencePiece with byte fallback and a leading-space strip, WordPiece (window)
TOKENIZERS = ["qwen2", "gguf-llama-spm", "gguf-bert-bge"]
_TEXT = "Hello 北京欢迎你 🫨👍🏽👨‍👩‍👧 สวัสดี नमस्ते stop here, x ** 2"


def _python_fallback_class() -> type:
    """DecodeStream as it is without the compiled extension (its base module and the module
    loaded again with the extension's import failing)."""
    blocked, core = "detok._native._streamcore", "detok.stream.stream_core"
    saved = {name: sys.modules.get(name) for name in (blocked, core)}
    sys.modules[blocked] = None  # type: ignore[assignment]  # `from ... import` raises ImportError
    sys.modules.pop(core, None)  # (imported again, without the extension)
    try:
        spec = importlib.util.spec_from_file_location("_decode_stream_python_only", decode_stream_module.__file__)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fallback_core = sys.modules[core]
    finally:
        for name, was in saved.items():
            if was is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = was
        package = sys.modules["detok.stream"]
        package.stream_core = saved[core]  # type: ignore[attr-defined]  # (the import set it to the new one)
    assert module._StreamCore is fallback_core.PythonStreamCore
    return module.DecodeStream


_PyDecodeStream = _python_fallback_class()


class _OldPath(DecodeStream):  # type: ignore[misc,valid-type]
    """Every step through the Python path, with a list (the general path, no compiled step)."""

    __slots__ = ()

    def step(self, token_ids: Any) -> Any:
        return self._step_py(list(token_ids) if not isinstance(token_ids, int) else [token_ids])


class _GeneralInit(DecodeStream):  # type: ignore[misc,valid-type]
    """Set up through `__init__`'s general path (no `_init_plain` shortcut)."""

    __slots__ = ()

    def _init_plain(self, *args: Any) -> bool:
        return False


_POOLS: dict[str, list[int]] = {}


def _pool(name: str) -> list[int]:
    if name not in _POOLS:
        tok = stream_roster.get(name)
        ids = set(tok.encode(_TEXT)) | set(tok.special_ids) | set(tok.eos_token_ids)
        for piece in ("<0xE4>", "<0xB8>", "<0x80>", "<0xF0>", "âĢ", "ä¸", "Ġ"):
            i = tok.token_to_id(piece)
            if i is not None:
                ids.add(i)
        _POOLS[name] = sorted(ids) + [tok.vocab_size, tok.vocab_size + 5, -1]
    return _POOLS[name]


def _params(pool: list[int]) -> list[DecodeParams]:
    stop_id = pool[len(pool) // 2]
    return [
        DecodeParams(),
        DecodeParams(skip_special_tokens=False),
        DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=False),
        DecodeParams(stop=["stop", "京欢"], stop_token_ids=(stop_id,)),
        DecodeParams(min_tokens=3, visible_stop_token_ids=(stop_id,)),
        DecodeParams(include_stop_str_in_output=True, stop=["here"]),
    ]


def _state(s: Any) -> tuple[int, int, bool, bytes, bool]:
    return s.num_tokens, s.char_offset, s.finished, s.held_bytes, s.holding_utf8


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_int_step_is_the_list_step_and_the_python_path(name: str, data: st.DataObject) -> None:
    tok = stream_roster.get(name)
    pool = _pool(name)
    valid = [i for i in pool if 0 <= i < tok.vocab_size]
    params = data.draw(st.sampled_from(_params(pool)))
    ignore_eos = data.draw(st.booleans())
    context = data.draw(st.lists(st.sampled_from(valid), max_size=7))
    ids = data.draw(st.lists(st.sampled_from(pool), max_size=40))
    classes = (DecodeStream, DecodeStream, _PyDecodeStream, _OldPath, _GeneralInit)
    streams = [cls(tok, context, params, ignore_eos=ignore_eos) for cls in classes]
    n = len(streams) - 1
    for i in ids:
        deltas = [streams[0].step(i), streams[1].step([i]), *(s.step(i) for s in streams[2:])]
        assert deltas[1:] == deltas[:1] * n, i
        assert [_state(s) for s in streams[1:]] == [_state(streams[0])] * n
    reason = data.draw(st.sampled_from(["length", "abort"]))
    ends = [s.finish(reason) for s in streams]
    assert ends[1:] == ends[:1] * n
    assert [_state(s) for s in streams[1:]] == [_state(streams[0])] * n
    assert [s.finish("length") for s in streams] == [streams[0].finish("length")] * (n + 1)
    assert len({s.stop_kind for s in streams}) == 1


_FIELDS = ("_vocab", "num_tokens", "char_offset", "finished", "stop_kind", "_visible", "_hidden", "_stop_ids", "_stops",
           "_min_tokens", "_stop", "_plain", "_pending_error", "_texts", "_pieces", "_deltas", "_fast", "_held")


def _fields(stream: Any) -> list[Any]:
    """The stream's fields, an error by its text (a slot the Python class never set: "unset")."""
    values = [getattr(stream, f, "unset") for f in _FIELDS]
    return [repr(v) if isinstance(v, Exception) else v for v in values]


@pytest.mark.parametrize("cls", [DecodeStream, _PyDecodeStream], ids=["compiled", "python"])
@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_plain_set_up_is_the_general_one(cls: type, name: str, data: st.DataObject) -> None:
    """A stream `_init_plain` sets up has every field the general path gives it (and a decoder in
    the same state), for any prompt tail and plain parameters; the shortcut is taken where the tail
    leaves nothing held."""
    tok = stream_roster.get(name)
    params = data.draw(st.sampled_from(_params(_pool(name))[:3]))
    context = data.draw(st.lists(st.sampled_from(_pool(name)), max_size=7))
    ignore_eos = data.draw(st.booleans())
    general = type("General", (cls,), {"__slots__": (), "_init_plain": lambda self, *a: False})
    a, b = cls(tok, context, params, ignore_eos=ignore_eos), general(tok, context, params, ignore_eos=ignore_eos)
    assert _fields(a) == _fields(b)
    for dec_a, dec_b in ((a._text, b._text),):
        assert type(dec_a) is type(dec_b)
        if isinstance(dec_a, ByteTextDecoder):
            assert (dec_a._t, dec_a._pending, dec_a._strip, dec_a._after_added, dec_a._fast) == (
                dec_b._t, dec_b._pending, dec_b._strip, dec_b._after_added, dec_b._fast)


def test_a_whole_tokens_delta_is_made_once_and_never_stands_for_held_bytes() -> None:
    """The one-id step hands out one Delta per whole token of a decode mode (it is immutable);
    a stream holding part of a character gets its own text for that id, on both classes."""
    tok = stream_roster.get("qwen2")
    word = tok.encode(" hello")[0]
    lead = prepare_decoding(tok).tables(True, True).pieces.index(b"\xe4")  # a 3-byte character's first byte
    for cls in (DecodeStream, _PyDecodeStream):
        a, b = cls(tok, [], None), cls(tok, [], None)
        first = a.step(word)
        assert first.text == tok.decode([word]) and b.step(word) is first
        assert b.step(lead).text == ""
        replaced = b.step(word)
        assert replaced.text == "\ufffd" + first.text and replaced is not first
        assert a.step(word) is first


def test_int_step_hostile_values() -> None:
    """Ids no vocabulary has (negative, past it, past 64 bits) end the stream with the list
    path's error; a bool is not an id; a finished stream gives empty deltas."""
    tok = stream_roster.get("qwen2")
    for bad in (-1, tok.vocab_size, 2**70):
        a, b = DecodeStream(tok), _OldPath(tok)
        assert a.step(bad) == b.step(bad) and a.finished and a.step(5) == b.step(5)
        assert a.step(5).text == "" and a.num_tokens == b.num_tokens
    with pytest.raises(TypeError):
        DecodeStream(tok).step(True)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", TOKENIZERS[:2])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_prompt_tail_shortcut_is_the_push(name: str, data: st.DataObject) -> None:
    tok = stream_roster.get(name)
    plan = prepare_decoding(tok)
    tables = plan.tables(data.draw(st.booleans()), True)
    assert tables is not None
    context = data.draw(st.lists(st.sampled_from(_pool(name)), max_size=6))
    reference = ByteTextDecoder(tables, ())
    try:
        if context:
            reference.push(context)
    except OutOfVocabulary:
        with pytest.raises(OutOfVocabulary):
            ByteTextDecoder(tables, context)
        assert context_held(tables, context) is None
        return
    reference._after_added = False
    reference._fast = not (reference._strip or reference._pending)
    dec = ByteTextDecoder(tables, context)
    assert (dec._pending, dec._strip, dec._after_added, dec._fast) == (
        reference._pending, reference._strip, reference._after_added, reference._fast)
    held = context_held(tables, context)
    assert held is None or (held == reference._pending and not reference._strip)


def _batches(rows: Sequence[tuple[int, int, list[int]]], sent: dict[int, int], pool: list[int]) -> tuple[Any, ...]:
    rids, starts, counts, tokens = [], [], [], []
    for rid, skew, picks in rows:
        rids.append(rid)
        starts.append(max(0, sent[rid] + skew))
        chosen = [pool[p % len(pool)] for p in picks]
        counts.append(len(chosen))
        tokens += chosen
        sent[rid] = starts[-1] + len(chosen)
    return np.array(rids, dtype=np.uint64), starts, counts, np.array(tokens, dtype=np.int64)


@pytest.mark.ci_examples(12)
@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 9), st.integers(-1, 1), st.lists(st.integers(0, 10_000), max_size=2)), max_size=16),
        min_size=1, max_size=10,
    ),
    contexts=st.lists(st.lists(st.integers(0, 10_000), max_size=6), min_size=8, max_size=8),
)
def test_deferred_requests_step_as_streams_made_at_open(name: str, batches: list[Any], contexts: list[list[int]]) -> None:
    tok = stream_roster.get(name)
    pool = [i for i in _pool(name) if i >= 0]
    params = _params(pool)
    deferred, eager = StreamTable(tok, capacity=4), StreamTable(tok, capacity=4)
    eager._plain_mode = lambda *mode: None  # type: ignore[method-assign]  # every request gets its stream at open
    for table in (deferred, eager):
        for rid in range(8):  # 8 and 9 are never registered
            ctx = [pool[p % len(pool)] for p in contexts[rid]]
            table.open(rid, ctx, params[rid % 3] if rid < 6 else params[3 + rid % 3], ignore_eos=rid % 4 == 0)
    assert not eager._deferred
    sent = dict.fromkeys(range(10), 0)
    for rows in batches:
        args = _batches(rows, sent, pool)
        assert deferred.step(*args) == eager.step(*args)
    for rid in range(10):
        assert deferred.finish(rid, "length") == eager.finish(rid, "length")
    assert len(deferred) == len(eager) == 0
