"""The frontend's compiled push and its Python twins, held equal on random inputs.

- `stream_fields.idle_for_push` (when a stream's new row may be pushed at once) and the compiled
  test `push_rows` runs (`detok_fields_idle`, exported as `_chunkpush.idle_for_push`);
- `StreamFields` / `TypedFields` (the extension's storage) and `PythonStreamFields` /
  `PythonTypedFields` (the same fields without it);
- a row's chunk: `ChunkRenderer.text` (msgspec's JSON of the text in the chunk's frame) and the
  compiled `frame_text`, the bytes `TextPusher` and `push_rows` write;
- a batch's logprob entry-rows: the compiled cut (`_logprobrows.rows`) and `_rows_py`, with the
  first token index and items beside each entries object that `push_rows` reads.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from detok.receiver.request_stream import RequestStream
from detok.receiver.stream_fields import PythonStreamFields, PythonTypedFields, idle_for_push
from detok.receiver.token_logprobs import TokenLogprobs, _rows_py
from detok.streaming.chunks import ChunkRenderer
from detok.wire.params import Finish

_chunkpush = pytest.importorskip("detok._native._chunkpush", reason="built without its C extensions")
_logprobrows = pytest.importorskip("detok._native._logprobrows", reason="built without its C extensions")


def _members(cls: type) -> set[str]:
    return {name for name, v in vars(cls).items() if type(v).__name__ == "member_descriptor"}


def test_the_compiled_storage_has_the_python_twins_fields() -> None:
    assert _members(_chunkpush.StreamFields) == set(PythonStreamFields.__slots__)
    assert _members(_chunkpush.TypedFields) == set(PythonTypedFields.__slots__)


_CHUNKS = st.sampled_from([[], ["a"], ["a", "b"], ("a",), None])  # (a tuple, None: not a list: not idle)
_RUNS = st.sampled_from([[], [TokenLogprobs(0, [1], ["x"], [-0.5], [0], [], [], [])], None])


@settings(max_examples=300, deadline=None)
@given(queued=st.booleans(), finish=st.sampled_from([None, Finish("stop")]), typed=st.sampled_from([None, object()]),
       chunks=_CHUNKS, runs=_RUNS, typed_row=st.booleans())
def test_idle_for_push_is_the_same_rule_compiled(queued: bool, finish: Any, typed: Any, chunks: Any, runs: Any,
                                                 typed_row: bool) -> None:
    compiled = RequestStream(1, types.SimpleNamespace(gaps=0))  # type: ignore[arg-type]
    python = PythonStreamFields()
    for fields in (compiled, python):
        fields._push_queued, fields.finish, fields._typed = queued, finish, typed
        fields._chunks, fields._logprobs = chunks, runs
    want = idle_for_push(python, typed_row)
    assert _chunkpush.idle_for_push(compiled, typed_row) is want
    assert idle_for_push(compiled, typed_row) is want
    assert want == (not queued and finish is None and (typed_row or typed is None) and chunks == [] and runs == [])


_RENDER = ChunkRenderer("chat", "chatcmpl-1", 1, "m")


def _framed(chunk: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(chunk), chunk)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40))
@example(text='\t\n\r\b\f"\\\x00\x1f\x7f\u2028é😀')  # (every escape kind, and multi-byte characters)
def test_a_rows_chunk_is_the_renderers_bytes_compiled(text: str) -> None:
    before, after = _RENDER.text_frame(0)
    assert _chunkpush.frame_text(before, text, after) == _framed(_RENDER.text(0, text))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 999), st.integers(0, 4)), max_size=6),
       items=st.booleans())
def test_entry_rows_are_the_same_compiled(rows: list[tuple[int, int, int]], items: bool) -> None:
    import numpy as np

    rids, firsts, counts = [r for r, _, _ in rows], [f for _, f, _ in rows], [c for _, _, c in rows]
    n = sum(counts)
    cols: list[Any] = [rids, firsts, counts, list(range(n)), [str(i) for i in range(n)], [-0.5] * n, [0] * n, [], [], []]
    python = _rows_py(*cols)
    if not items:
        assert _logprobrows.rows(TokenLogprobs, *cols) == python
        assert all(first == run.first and got is None for _, run, first, got in python)
        return
    blob = b"".join(b"{%d}" % i for i in range(n))
    lengths = np.array([len(b"{%d}" % i) for i in range(n)], "<u4").tobytes()
    compiled = _logprobrows.rows(TokenLogprobs, *cols, blob, lengths)
    for (rid, run, first, got), count in zip(compiled, counts):
        assert first == run.first and got is run.items
        assert (got is None) == (count == 0)
    assert [(r, run.first, run.token_ids) for r, run, _, _ in compiled] == [(r, run.first, run.token_ids) for r, run, _, _ in python]
