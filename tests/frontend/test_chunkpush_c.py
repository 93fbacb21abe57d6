"""The compiled text-only chunk pusher (`detok/_native/_chunkpush.c`).

- Its chunk is the Python pusher's, byte for byte: the renderer's text chunk framed as uvicorn
  frames it, for every code point and any text (msgspec's JSON string escaping, UTF-8 kept).
- It does what ChunkPusher's text-only branch does, step by step on a real RequestStream: a paused
  or gone client declines with nothing taken; text alone is taken, timed, then written; anything
  else (logprob entries, a finish, typed output, nothing waiting, a text without UTF-8) is the
  Python pusher's, called with the stream unchanged; what a write or the clock raises, it raises.
- `pusher_for` picks it only where it applies; hostile construction and calls are clean errors;
  no reference is leaked over many pushes.
(The whole response with it, against the consumer's alone: tests/frontend/test_chunk_push.py.)
"""

from __future__ import annotations

import sys
import types
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.streaming.chunk_push import ChunkPusher, pusher_for
from detok.streaming.chunks import ChunkRenderer
from detok.api.responses import ChoiceState, ResponseContext
from detok.receiver.request_stream import RequestStream
from detok.receiver.token_logprobs import TokenLogprobs
from detok.wire.params import Finish

_chunkpush = pytest.importorskip("detok._native._chunkpush", reason="built without its C extensions")
TextPusher, frame_text = _chunkpush.TextPusher, _chunkpush.frame_text


def _framed(chunk: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(chunk), chunk)  # (DirectWriter.write's framing)


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_the_chunk_of_every_code_point_is_the_renderers(kind: str) -> None:
    render = ChunkRenderer(kind, "chatcmpl-x", 1, "m")  # type: ignore[arg-type]
    before, after = render.text_frame(0)
    points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for start in range(0, len(points), 4096):  # (each code point alone would take minutes)
        text = "".join(map(chr, points[start:start + 4096]))
        assert frame_text(before, text, after) == _framed(render.text(0, text))
    for c in range(0x80):  # each ASCII character alone: its escape with nothing around it
        assert frame_text(before, chr(c), after) == _framed(render.text(0, chr(c)))


@settings(max_examples=300, deadline=None)
@given(text=st.text(), index=st.integers(0, 2), chat=st.booleans())
def test_the_chunk_of_any_text_is_the_renderers(text: str, index: int, chat: bool) -> None:
    render = ChunkRenderer("chat" if chat else "completion", "id", 2, "model", choices=3)
    before, after = render.text_frame(index)
    assert frame_text(before, text, after) == _framed(render.text(index, text))
    assert render.text(index, text) == before + msgspec.json.encode(text) + after


def test_a_text_without_utf8_is_refused_as_msgspec_refuses_it() -> None:
    with pytest.raises(UnicodeEncodeError):
        frame_text(b"", "a\ud800", b"")
    with pytest.raises(UnicodeEncodeError):
        msgspec.json.encode("a\ud800")


class _Conn:
    """flow and cycle as uvicorn's (the attributes read), and the transport's write."""

    def __init__(self) -> None:
        self.flow = types.SimpleNamespace(write_paused=False)
        self.cycle = types.SimpleNamespace(disconnected=False)
        self.out: list[bytes] = []
        self.log: list[str] = []

    def write(self, data: bytes) -> None:
        self.log.append("write")
        self.out.append(data)


class _Fallback:
    def __init__(self, answer: bool = True) -> None:
        self.calls: list[tuple[list[str], Any]] = []
        self.answer = answer

    def __call__(self, stream: RequestStream) -> bool:
        self.calls.append((list(stream._chunks), stream.finish))
        return self.answer


def _setup(answer: bool = True) -> tuple[Any, RequestStream, _Conn, _Fallback, ChunkRenderer]:
    render = ChunkRenderer("chat", "chatcmpl-1", 1, "m")
    conn, fallback = _Conn(), _Fallback(answer)
    before, after = render.text_frame(0)
    pusher = TextPusher(fallback, conn.flow, conn.cycle, conn.write, lambda: conn.log.append("timer"), before, after,
                        take=RequestStream.take_text)
    return pusher, RequestStream(1, types.SimpleNamespace(gaps=0)), conn, fallback, render  # type: ignore[arg-type]


def test_text_alone_is_taken_timed_then_written() -> None:
    pusher, stream, conn, fallback, render = _setup()
    stream._chunks += ["Hel", "lo \n\"x\""]
    assert pusher(stream) is True
    assert stream._chunks == [] and conn.out == [_framed(render.text(0, 'Hello \n"x"'))]
    assert conn.log == ["timer", "write"] and fallback.calls == []
    stream._chunks.append("é")
    assert pusher(stream) is True and conn.out[-1] == _framed(render.text(0, "é"))


@pytest.mark.parametrize("where", ["paused", "gone"])
def test_a_client_that_does_not_read_declines_with_nothing_taken(where: str) -> None:
    pusher, stream, conn, fallback, _ = _setup()
    if where == "paused":
        conn.flow.write_paused = True
    else:
        conn.cycle.disconnected = True
    stream._chunks.append("x")
    assert pusher(stream) is False
    assert stream._chunks == ["x"] and conn.out == [] and conn.log == [] and fallback.calls == []


@pytest.mark.parametrize("answer", [True, False])
@pytest.mark.parametrize("what", ["logprobs", "finish", "typed", "nothing"])
def test_anything_but_text_alone_is_the_python_pushers(what: str, answer: bool) -> None:
    pusher, stream, conn, fallback, _ = _setup(answer)
    stream._chunks.append("a")
    if what == "logprobs":
        stream._logprobs.append(TokenLogprobs(0, [5], ["a"], [-0.5], [0], [], [], []))
    elif what == "finish":
        stream.finish = Finish("length")
    elif what == "typed":
        stream._typed = object()  # type: ignore[assignment]
    elif what == "nothing":
        stream._chunks.clear()
    before = list(stream._chunks)
    assert pusher(stream) is answer
    assert fallback.calls == [(before, stream.finish)] and conn.out == [] and conn.log == []
    assert stream._chunks == before


def test_a_text_without_utf8_is_taken_and_raises_as_the_python_pushers() -> None:
    pusher, stream, conn, fallback, render = _setup()
    python = ChunkPusher(types.SimpleNamespace(logprobs=None, continuous_usage=False), render,  # type: ignore[arg-type]
                         types.SimpleNamespace(timer=types.SimpleNamespace(text=lambda: None)),  # type: ignore[arg-type]
                         types.SimpleNamespace(ready=lambda: True, write=conn.out.append))  # type: ignore[arg-type]
    twin = RequestStream(2, types.SimpleNamespace(gaps=0))  # type: ignore[arg-type]
    for s in (stream, twin):
        s._chunks += ["a", "\ud800"]
    with pytest.raises(UnicodeEncodeError):
        pusher(stream)
    with pytest.raises(UnicodeEncodeError):
        python(twin)
    assert stream._chunks == twin._chunks == [] and conn.out == [] and fallback.calls == []


@pytest.mark.parametrize("which", ["write", "timer", "fallback"])
def test_what_a_write_the_clock_or_the_fallback_raises_is_raised(which: str) -> None:
    render = ChunkRenderer("completion", "c", 1, "m")
    before, after = render.text_frame(0)

    def boom(*_args: object) -> bool:
        raise OSError(which)

    conn = _Conn()
    pusher = TextPusher(boom if which == "fallback" else (lambda s: True), conn.flow, conn.cycle,
                        boom if which == "write" else conn.write, boom if which == "timer" else None, before, after,
                        take=RequestStream.take_text)
    stream = RequestStream(1, types.SimpleNamespace(gaps=0))  # type: ignore[arg-type]
    stream._chunks.append("x") if which != "fallback" else stream._chunks.clear()
    with pytest.raises(OSError, match=which):
        pusher(stream)


def test_hostile_construction_and_calls_are_clean_errors() -> None:
    ok = dict(fallback=lambda s: True, flow=object(), cycle=object(), write=lambda b: None, timer_text=None,
              prefix=b"", suffix=b"", take=RequestStream.take_text)
    for key, bad in [("fallback", 1), ("write", "w"), ("timer_text", 3), ("prefix", "str"), ("suffix", bytearray()),
                     ("take", None), ("take", "take_text")]:
        with pytest.raises(TypeError):
            TextPusher(**{**ok, key: bad})
    pusher = TextPusher(**ok)
    with pytest.raises(TypeError):
        pusher()
    with pytest.raises(TypeError):
        pusher(1, 2)
    with pytest.raises(TypeError):
        pusher(stream=1)
    with pytest.raises(AttributeError):  # not a stream, and a flow without the attribute
        pusher(object())
    conn = _Conn()
    on_int = TextPusher(lambda s: "fallback", conn.flow, conn.cycle, conn.write, None, b"", b"", take=RequestStream.take_text)
    stream = RequestStream(1, types.SimpleNamespace(gaps=0))  # type: ignore[arg-type]
    stream._chunks.append(5)  # type: ignore[arg-type]  # (not a str: refused, nothing written)
    with pytest.raises(TypeError, match="must be a str"):
        on_int(stream)
    assert conn.out == []


def test_no_reference_is_leaked_over_many_pushes() -> None:
    pusher, stream, conn, _, _ = _setup()
    text = "a shared text é"
    before = sys.getrefcount(text)
    for _ in range(5000):
        stream._chunks.append(text)
        pusher(stream)
        stream._chunks += [text, text]
        pusher(stream)
    conn.out.clear()
    assert sys.getrefcount(text) == before and sys.getrefcount(pusher) == 2


class _Direct:
    def __init__(self) -> None:
        self.conn = _Conn()

    def ready(self) -> bool:
        return True

    def write(self, chunk: bytes) -> None:
        self.conn.write(_framed(chunk))

    def parts(self) -> tuple[Any, Any, Any]:
        return self.conn.flow, self.conn.cycle, self.conn.write


@pytest.mark.parametrize("case", ["text", "logprobs", "usage", "no parts", "two choices", "logprobs usage",
                                  "logprobs as ids", "completion logprobs"])
def test_pusher_for_picks_the_compiled_pusher_only_where_it_applies(case: str) -> None:
    kind = "completion" if case.startswith("completion") else "chat"
    ctx = ResponseContext(kind, "id", "m", 3, False, 0.0)  # type: ignore[arg-type]
    ctx.direct = _Direct() if case != "no parts" else types.SimpleNamespace(ready=lambda: True, write=lambda c: None)
    if "logprobs" in case:
        ctx.logprobs = 2
    if "usage" in case:
        ctx.continuous_usage = True
    ctx.tokens_as_ids = case == "logprobs as ids"
    n = 2 if case == "two choices" else 1
    choices = [ChoiceState(i, ctx, None) for i in range(n)]
    render = ChunkRenderer(kind, "id", 1, "m", n)
    streams = [RequestStream(i, types.SimpleNamespace(gaps=0)) for i in range(n)]  # type: ignore[arg-type]
    pusher = pusher_for(ctx, render, choices, streams)
    if case == "two choices":
        assert pusher is None
    elif case == "text":
        assert isinstance(pusher, TextPusher) and isinstance(pusher.fallback, ChunkPusher)
        streams[0]._chunks.append("hi")
        assert pusher(streams[0]) is True
        assert ctx.direct.conn.out == [_framed(render.text(0, "hi"))]
    elif case == "logprobs":  # the items mode: rendered entries written by the compiled pusher
        assert isinstance(pusher, TextPusher) and isinstance(pusher.fallback, ChunkPusher)
        streams[0]._chunks.append("hi")
        streams[0]._logprobs.append(_run(0, [b'{"x":1}']))
        assert pusher(streams[0]) is True
        assert ctx.direct.conn.out == [_framed(render.text(0, "hi", msgspec.Raw(b'{"content":[{"x":1}]}')))]
    else:
        assert isinstance(pusher, ChunkPusher)


@pytest.mark.parametrize("case", ["shown", "hidden", "reasoning_content", "logprobs", "usage"])
def test_pusher_for_gives_a_parsed_chat_choice_a_typed_pusher(case: str) -> None:
    from detok.parsing.types import OutputParsing

    ctx = ResponseContext("chat", "id", "m", 3, False, 0.0)  # type: ignore[arg-type]
    ctx.direct = _Direct()
    ctx.parsing = OutputParsing(reasoning_parser="qwen3")
    ctx.include_reasoning = case != "hidden"
    ctx.reasoning_field = "reasoning_content" if case == "reasoning_content" else "reasoning"
    ctx.logprobs = 2 if case == "logprobs" else None
    ctx.continuous_usage = case == "usage"
    choices = [ChoiceState(0, ctx, None)]
    render = ChunkRenderer("chat", "id", 1, "m")
    stream = RequestStream(0, types.SimpleNamespace(gaps=0))  # type: ignore[arg-type]
    pusher = pusher_for(ctx, render, choices, [stream])
    if case in ("logprobs", "usage"):  # (the consumer's, as before)
        assert pusher is None
        return
    assert isinstance(pusher, TextPusher) and isinstance(pusher.fallback, ChunkPusher)
    # called itself on typed output: the fallback declines it, nothing written (the consumer's)
    stream._feed_kind(2, "hi", 0)
    assert pusher(stream) is False and ctx.direct.conn.out == [] and stream._chunks == ["hi"]
    field = render.field_prefix(0, ctx.reasoning_field)
    assert render.field(0, ctx.reasoning_field, "x") == field + b'"x"' + render.text_frame(0)[1]


def test_typed_pushers_refuse_what_they_cannot_write() -> None:
    ok: dict[str, Any] = dict(fallback=lambda s: True, flow=object(), cycle=object(), write=lambda b: None,
                              timer_text=None, prefix=b"", suffix=b"", take=RequestStream.take_text)
    TextPusher(**ok, typed=True, reasoning=b"r")
    TextPusher(**ok, typed=True)
    for bad in (dict(reasoning=b"r"), dict(typed=True, reasoning="r"), dict(typed=True, mid=b"", items_suffix=b"")):
        with pytest.raises(TypeError):
            TextPusher(**ok, **bad)


# ---- the items mode: chat logprobs rendered by the workers ------------------------------------
def _run(first: int, items: list[bytes] | None) -> TokenLogprobs:
    n = len(items) if items is not None else 1
    return TokenLogprobs(first, list(range(first, first + n)), [""] * n, [-0.5] * n, [0] * n, [], [], [],
                         items)


def _items_pair(k: int = 3) -> tuple[Any, Any, RequestStream, RequestStream, _Conn, _Direct, _Fallback]:
    """The compiled pusher in items mode and the Python one, each with its stream and connection."""
    ctx = ResponseContext("chat", "chatcmpl-9", "m", 5, False, 0.0)  # type: ignore[arg-type]
    ctx.logprobs = k
    render = ChunkRenderer("chat", "chatcmpl-9", 5, "m")
    conn, fallback, direct = _Conn(), _Fallback(), _Direct()
    before, after = render.text_frame(0)
    mid, end = render.items_frame()
    compiled = TextPusher(fallback, conn.flow, conn.cycle, conn.write, None, before, after, mid, end,
                          take=RequestStream.take_items)
    python = ChunkPusher(ctx, render, ChoiceState(0, ctx, None), direct)  # type: ignore[arg-type]
    streams = [RequestStream(i, types.SimpleNamespace(gaps=0, logprob_gaps=0)) for i in (1, 2)]  # type: ignore[arg-type]
    return compiled, python, streams[0], streams[1], conn, direct, fallback


_item = st.builds(lambda d: msgspec.json.encode(d), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(deltas=st.lists(st.tuples(st.lists(st.text(min_size=1, max_size=5), max_size=2),  # (a stream keeps no "")
                                 st.lists(st.lists(_item, min_size=1, max_size=3), max_size=3)), min_size=1, max_size=4))
def test_items_mode_writes_the_python_pushers_chunks(deltas) -> None:
    compiled, python, mine, twin, conn, direct, fallback = _items_pair()
    token = 0
    for texts, runs in deltas:
        if not (texts or runs):
            continue  # (nothing waiting: the Python pusher's, below)
        for s in (mine, twin):
            s._chunks += texts
        for items in runs:
            for s in (mine, twin):
                s._logprobs.append(_run(token, list(items)))
            token += len(items)
        compiled(mine)
        python(twin)
        assert mine._chunks == twin._chunks == [] and mine._logprobs == twin._logprobs == []
    assert conn.out == direct.conn.out and fallback.calls == []


@pytest.mark.parametrize("what", ["unrendered", "mixed", "finish", "typed", "nothing"])
def test_items_mode_leaves_anything_else_to_the_python_pusher(what: str) -> None:
    compiled, _, stream, _, conn, _, fallback = _items_pair()
    stream._chunks.append("a")
    if what == "unrendered":
        stream._logprobs.append(_run(0, None))
    elif what == "mixed":
        stream._logprobs += [_run(0, [b"{}"]), _run(1, None)]
    elif what == "finish":
        stream.finish = Finish("stop")
    elif what == "typed":
        stream._typed = object()  # type: ignore[assignment]
    else:
        stream._chunks.clear()
    runs = list(stream._logprobs)
    assert compiled(stream) is True and conn.out == []
    assert fallback.calls == [(list(stream._chunks), stream.finish)] and stream._logprobs == runs


def test_items_mode_hostile_construction_and_takes() -> None:
    ok = dict(fallback=lambda s: True, flow=types.SimpleNamespace(write_paused=False),
              cycle=types.SimpleNamespace(disconnected=False), write=lambda b: None, timer_text=None,
              prefix=b"", suffix=b"", take=RequestStream.take_items)
    for extra in ({"mid": b"m"}, {"items_suffix": b"e"}, {"mid": "m", "items_suffix": b"e"}):
        with pytest.raises(TypeError):
            TextPusher(**ok, **extra)
    for bad in ("text", ("t",), ("t", (b"x",)), ("t", [b"x", "y"]), (5, None)):
        pusher = TextPusher(**{**ok, "take": lambda s, bad=bad: bad}, mid=b"m", items_suffix=b"e")
        with pytest.raises(TypeError):
            pusher(object())


def test_items_mode_leaks_no_reference() -> None:
    compiled, _, stream, _, conn, _, _ = _items_pair()
    item, text = b'{"token":"a"}' * 3, "some text"
    before = sys.getrefcount(item), sys.getrefcount(text)
    for i in range(3000):
        stream._chunks.append(text)
        stream._logprobs += [_run(2 * i, [item]), _run(2 * i + 1, [item])]
        compiled(stream)
    conn.out.clear()
    assert (sys.getrefcount(item), sys.getrefcount(text)) == before
