"""A request's decode with output parsing: the same text as `DecodeStream`, turned into typed rows.

Order of work per step, as vLLM: the ids are decoded and the stop rules (stop strings, stop ids,
`min_tokens`, `include_stop_str_in_output`) apply to the RAW text first, exactly as for a plain
request (this is a `DecodeStream`); only the text that survives them is fed to the parser.

Markers that are one token are cut out by id: a step's ids are split at the parser's marker ids so
each marker id is pushed to the text decoder alone, and the decoder (wrapped by `_RawText`) records
where that id's text lies in the raw text. The emitted text (a prefix of the raw text: stop rules only
hold back or cut) is then fed as plain pieces and marker pieces at those places; a marker
whose text is only partly emitted (a stop-string prefix held back) waits for the rest, and one cut
by a stop string becomes plain text. A marker id is a marker even where its text is skipped
(`skip_special_tokens`): the parser still sees it, by id, as vLLM's parsers see the ids; its piece's
text is then empty, so a marker the reasoning parser passes on as text adds none.

Nothing this object steps goes into the plain text columns (its row's text is empty); its output
leaves as `TypedRow`s handed to `emit`, each stream (reasoning, content, each call's arguments) with
its char offset, so a replay (the whole request again, on a fresh worker) is de-duplicated exactly.
In a steady parser state the table decodes the request's ids on its compiled path instead, as text
rows of one kind (`detok.stream.typed_fast`; `steady_text`, `absorb_fast`).
A parser that raises finishes its request with an error; it never reaches the worker's loop.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from detok.parsing.output import OutputParser
from detok.parsing.types import KIND_CONTENT, KIND_REASONING, Piece, Steady, TypedDelta
from detok.stream.byte_text import ByteTextDecoder
from detok.stream.decode_stream import DecodeStream
from detok.wire.params import EMPTY_DELTA, DecodeParams, Delta, Finish, FinishReason
from detok.stream.strategy import Strategy
from detok.tokenizer.base import Tokenizer
from detok.wire.to_frontends import CallFragment, TypedRow

log = logging.getLogger("detok.worker")


class _RawText:
    """Wraps a stream's text decoder: counts the raw chars it gives and records, for each push of
    exactly one marker id, the span of that id's text in the raw text."""

    __slots__ = ("_dec", "_markers", "marks", "raw")

    def __init__(self, dec: Any, markers: dict[int, str]) -> None:
        self._dec = dec
        self._markers = markers
        self.raw = 0
        self.marks: deque[tuple[int, int, str]] = deque()  # (start, end, marker) in raw chars

    @property
    def holding(self) -> bool:
        return bool(self._dec.holding)

    def push(self, ids: Sequence[int]) -> str:
        text: str = self._dec.push(ids)
        if len(ids) == 1:
            marker = self._markers.get(ids[0])
            if marker is not None:
                n = len(text)
                # bytes of an incomplete character held before it come out first (as U+FFFD):
                # they are plain text; the marker's own text is at the end
                start = self.raw + n - len(marker) if text.endswith(marker) else self.raw
                self.marks.append((start, self.raw + n, marker))
        self.raw += len(text)
        return text

    def flush(self) -> str:
        text: str = self._dec.flush()
        self.raw += len(text)
        return text


class TypedStream(DecodeStream):
    """`DecodeStream` whose output goes through an `OutputParser` into `TypedRow`s (see module)."""

    __slots__ = ("_broken", "_calls", "_coff", "_emit", "_fast_at", "_fed", "_markers", "_parser", "_raw", "_rid", "_roff",
                 "_tail")
    columnar: ClassVar[bool] = False  # never on the table's compiled plain path

    def __init__(
        self,
        tokenizer: Tokenizer,
        context_ids: Sequence[int] = (),
        params: DecodeParams | None = None,
        *,
        parser: OutputParser,
        rid: int,
        emit: Callable[[TypedRow], None],
        ignore_eos: bool = False,
        strategy: Strategy | None = None,
    ) -> None:
        super().__init__(tokenizer, context_ids, params, ignore_eos=ignore_eos, strategy=strategy)
        self._parser = parser
        self._markers = parser.marker_ids
        self._raw = _RawText(self._text, self._markers)
        self._text = self._raw
        self._rid = rid
        self._emit = emit
        self._fed = 0  # raw chars fed to the parser
        self._tail = ""  # emitted text not fed yet (it may end inside a marker's text)
        self._roff = 0  # chars of reasoning sent
        self._coff = 0  # chars of content sent
        self._calls: dict[int, int] = {}  # per call index: chars of arguments sent
        # (kind, call index, kind offset) while a StreamTable steps this request's plain ids on its
        # compiled path (`detok.stream.typed_fast`); None while this object steps
        self._fast_at: tuple[int, int, int] | None = None
        self._broken: Exception | None = None  # the parser failed to take a state back: the next step fails

    @property
    def calls_emitted(self) -> int:
        return self._parser.calls_emitted

    def step(self, token_ids: Sequence[int]) -> Delta:
        if self.finished:
            return EMPTY_DELTA
        markers = self._markers
        if len(token_ids) == 1 and token_ids[0] not in markers:  # the common step: one ordinary id
            delta = DecodeStream.step(self, token_ids)
            return self._parse(delta.text, delta.finish)
        texts: list[str] = []
        finish: Finish | None = None
        start = 0
        n = len(token_ids)
        step = super().step
        for k, i in enumerate(token_ids):
            if i in markers:  # the marker id alone, so its text is one push
                for seg in (token_ids[start:k], token_ids[k : k + 1]):
                    if seg and finish is None:
                        delta = step(seg)
                        texts.append(delta.text)
                        finish = delta.finish
                start = k + 1
                if finish is not None:
                    break
        if finish is None and start < n:
            delta = step(token_ids[start:] if start else token_ids)
            texts.append(delta.text)
            finish = delta.finish
        return self._parse("".join(texts), finish)

    def finish(self, reason: FinishReason = "length", message: str | None = None) -> Delta:
        if self.finished:
            return EMPTY_DELTA
        delta = super().finish(reason, message)
        return self._parse(delta.text, delta.finish)

    # ---- the table's compiled path (detok.stream.typed_fast) -------------------------------------
    def steady_text(self) -> tuple[Steady, int, int] | None:
        """(the parser's steady state, its call index, the offset its kind's text is at) when the
        next plain text of this stream goes to that kind unchanged: nothing held (a marker's text
        partly emitted, a stop-string prefix, text kept for a marker), no stop rule that the text
        itself decides, a byte-table decoder; None otherwise."""
        if self.finished or self._tail or self._raw.marks or not self._plain or self._pending_error is not None:
            return None
        dec = self._raw._dec
        if type(dec) is not ByteTextDecoder or dec._strip or dec._after_added:
            return None
        steady = self._parser.steady()
        if steady is None:
            return None
        if steady.held:
            return steady, -1, 0
        if steady.kind == KIND_REASONING:
            return steady, -1, self._roff
        if steady.kind == KIND_CONTENT:
            return steady, -1, self._coff
        index = self._parser.calls_emitted - 1
        return steady, index, self._calls.get(index, 0)

    def absorb_fast(self, chars: int, num_tokens: int, held: bytes, held_text: str = "") -> None:
        """What the table's compiled path decoded for this request since `_fast_at` was set: `chars`
        more of that kind, `num_tokens` consumed in all, `held` bytes of an incomplete character;
        `held_text`: the text the parser holds in the mode it left the slot in (a JSON string's
        escape's backslash, passed on; a string value's whitespace, held back; see
        `OutputParser.resume_held`).

        With a family's string value, `chars` counts the value's escaped text, not the raw
        text: the raw counters advance by it all the same (nothing is held or marked while on
        the path, so only their difference matters)."""
        fast_at = self._fast_at
        assert fast_at is not None
        kind, index, _ = fast_at
        self._fast_at = None
        self.num_tokens = num_tokens
        self.char_offset += chars
        self._raw.raw += chars
        self._fed += chars
        if kind == KIND_REASONING:
            self._roff += chars
        elif kind == KIND_CONTENT:
            self._coff += chars
        else:
            self._calls[index] = self._calls.get(index, 0) + chars
        dec = self._raw._dec
        dec._pending = held
        dec._fast = not (dec._strip or dec._after_added or held)
        if held_text:
            try:
                self._parser.resume_held(held_text)
            except Exception as e:  # noqa: BLE001 - a parser's failure is its request's error, at its next step
                self._broken = e

    def absorb_held(self, data: bytes, num_tokens: int) -> None:
        """What the table's compiled path kept for this request in a held steady state
        (`Steady.held`) since `_fast_at` was set: `data`, the raw bytes of its ids (after the bytes
        of an incomplete character held when it entered), `num_tokens` consumed in all. Their
        text goes to the parser in one piece, as one push of those ids would give it; an
        incomplete character's bytes stay held by the decoder."""
        assert self._fast_at is not None
        self._fast_at = None
        self.num_tokens = num_tokens
        text = self._raw._dec.take_kept(data)
        if not text:
            return
        self.char_offset += len(text)
        self._raw.raw += len(text)
        try:
            out = self._feed(text, final=False)
        except Exception as e:  # noqa: BLE001 - a parser's failure is its request's error, at its next step
            self._broken = e
            return
        if out:
            self._emit(self._row(out))

    # ---- parsing ------------------------------------------------------------------------------
    def _parse(self, text: str, finish: Finish | None) -> Delta:
        if self._broken is not None:
            return self._failed(self._broken)
        if not text and finish is None and not self._raw.marks:
            return EMPTY_DELTA  # nothing new (a character still incomplete, a held stop prefix)
        try:
            out = self._feed(text, final=finish is not None)
        except Exception as e:  # noqa: BLE001 - a parser's failure is its request's error
            return self._failed(e)
        if out:
            self._emit(self._row(out))
        if finish is not None:
            return Delta("", finish)
        return EMPTY_DELTA

    def _failed(self, e: Exception) -> Delta:
        log.warning("rid %s: output parsing failed: %s: %s", self._rid, type(e).__name__, e)
        self.finished = True
        return Delta("", Finish("error", None, f"output parsing failed: {type(e).__name__}: {e}"))

    def _feed(self, text: str, final: bool) -> TypedDelta:
        """Feed the emitted text so far, cut at the recorded marker spans (see the module)."""
        if not final and not self._raw.marks and not self._tail:  # the common case: plain text only
            if not text:
                return _NOTHING
            self._fed += len(text)
            return self._parser.feed(Piece(text))
        tail = self._tail + text
        fed = self._fed
        end = fed + len(tail)  # raw chars emitted so far
        marks = self._raw.marks
        out = TypedDelta()
        feed = self._parser.feed
        while marks:
            s, e, marker = marks[0]
            if e > end:  # not (wholly) emitted yet
                break
            marks.popleft()
            if s > fed:
                _add(out, feed(Piece(tail[: s - fed])))
            # the marker with the text the decoder gave for it: its own, or none where
            # skip_special_tokens skipped it (a marker the parser passes on as text then adds none)
            _add(out, feed(Piece(tail[max(0, s - fed) : e - fed], marker)))
            tail = tail[e - fed :]
            fed = e
        if final:
            marks.clear()  # text past the end (cut by a stop string) never comes
            keep = 0
        elif marks and marks[0][0] < end:
            keep = end - marks[0][0]  # the start of a marker whose text is partly emitted
        else:
            keep = 0
        plain = tail[: len(tail) - keep]
        if plain:
            _add(out, feed(Piece(plain)))
        self._tail = tail[len(tail) - keep :]
        self._fed = end - keep
        if final:
            _add(out, self._parser.finish())
        return out

    def _row(self, out: TypedDelta) -> TypedRow:
        row = TypedRow(self._rid, out.reasoning, self._roff, out.content, self._coff)
        self._roff += len(out.reasoning)
        self._coff += len(out.content)
        if out.tool_calls:
            calls = self._calls
            fragments = []
            for d in out.tool_calls:
                sent = calls.get(d.index, 0)
                fragments.append(CallFragment(d.index, d.id, d.name, d.arguments, sent))
                calls[d.index] = sent + len(d.arguments)
            row.calls = fragments
        return row


_NOTHING = TypedDelta()  # never mutated: returned only when nothing was fed


def _add(out: TypedDelta, more: TypedDelta) -> None:
    if more.reasoning:
        out.reasoning += more.reasoning
    if more.content:
        out.content += more.content
    if more.tool_calls:
        out.tool_calls.extend(more.tool_calls)


def calls_emitted(stream: DecodeStream) -> int:
    """Tool calls a request's parser emitted (0 for a plain request)."""
    return stream.calls_emitted if isinstance(stream, TypedStream) else 0
