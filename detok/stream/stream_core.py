"""DecodeStream's base and the start every plain stream shares.

`StreamCore` is the compiled one (`_streamcore.c`: the fields, the plain start, the one-id step
and the plain end), or, without the extension, `PythonStreamCore`, a Python class of the same fields
and results (tests load it and compare). `_plain_template` is what a plain stream of one decode
mode starts from, made once per plan; `StreamMaker` (compiled only) makes such streams without
running `__init__`.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from detok.stream.byte_text import ByteTextDecoder, ends_whole
from detok.wire.params import CONTEXT_TOKENS, EMPTY_DELTA, DecodeParams, Delta, Finish, FinishReason
from detok.stream.strategy import DecodePlan

_NO_IDS: frozenset[int] = frozenset()
_NO_TEMPLATE = ()  # (a plan's cache miss; None is "no template")
_utf8_decode = codecs.utf_8_decode
# reason -> the (immutable) Delta of a plain finish without a message (a finish with any other reason
# makes its own: this stays four entries)
_ENDED: dict[str, Delta] = {r: Delta("", Finish(r)) for r in ("stop", "length", "abort", "error")}


class PythonStreamCore:
    """The fields, start, one-id step and end of `_streamcore.StreamCore`, in Python (without the
    extension; same results): while `_fast`, `step(id)` of an id not in `_stops` is the id's
    precomputed text, or its bytes (`_pieces`) after the held ones (`_held`) through the incremental
    UTF-8 decoder; everything else goes to `_step_py`. `finish` is `_finish_py`, whose plain case
    (holding nothing: the reason's shared Delta) the compiled class runs itself."""

    __slots__ = ("_texts", "_pieces", "_deltas", "_stops", "_held", "num_tokens", "char_offset", "finished", "_fast",
                 # DecodeStream's own fields (the compiled class holds them too: see its `_open_plain`)
                 "_text", "_stop", "_pending_error", "stop_kind", "_visible", "_hidden", "_stop_ids", "_vocab",
                 "_min_tokens", "_plain", "_firsts")

    def _open_plain(self, template: tuple[object, ...], context: Sequence[int]) -> bool:
        """A new stream's plain fields from `_plain_template`'s tuple, where the prompt tail
        (a list or tuple) leaves nothing held; False, with nothing set, otherwise."""
        (decoder, _fields), texts, pieces, deltas, stops, no_ids, vocab, strip, max_context, tail_ids = template
        if not (_py_whole_tail(texts, context, tail_ids, max_context) if context else not strip):  # type: ignore[arg-type]
            return False
        self._text = ByteTextDecoder.holding_nothing(decoder._t)  # type: ignore[attr-defined]
        self._texts, self._pieces, self._deltas, self._vocab = texts, pieces, deltas, vocab  # type: ignore[assignment]
        self._stops = self._hidden = self._stop_ids = stops  # type: ignore[assignment]
        self._visible = no_ids
        self._stop = self._pending_error = self.stop_kind = self._firsts = None
        self.num_tokens = self.char_offset = self._min_tokens = 0
        self.finished = False
        self._plain = self._fast = True
        self._held = b""
        return True

    def finish(self, reason: FinishReason = "length", message: str | None = None) -> Delta:
        return self._finish_py(reason, message)  # type: ignore[attr-defined,no-any-return]  # (its plain case included)

    def step(self, token_ids: Sequence[int] | int) -> Delta:
        if self.finished:
            return EMPTY_DELTA
        i = token_ids[0] if type(token_ids) is list and len(token_ids) == 1 else token_ids
        if self._fast and type(i) is int and 0 <= i < len(self._texts) and i not in self._stops:  # type: ignore[arg-type,operator]
            text = self._texts[i]  # type: ignore[index]
            whole = text is not None and not self._held  # the id's own text: its Delta is shared
            if self._firsts is not None and not (whole and not any(c in text for c in self._firsts)):  # type: ignore[attr-defined]
                return self._step_py(token_ids)  # type: ignore[attr-defined]  # (may begin a stop string)
            if not whole:
                if self._pieces is None or i >= len(self._pieces):
                    return self._step_py(token_ids)  # type: ignore[attr-defined]
                data = self._held + self._pieces[i]
                text, used = _utf8_decode(data, "replace", False)
                self._held = data[used:]
            self.num_tokens += 1
            if text:
                self.char_offset += len(text)
                if not whole or self._deltas is None:
                    return Delta(text)
                delta = self._deltas[i]
                if delta is None:
                    delta = self._deltas[i] = Delta(text)
                return delta  # type: ignore[return-value]
            return EMPTY_DELTA
        return self._step_py(token_ids)  # type: ignore[attr-defined]


# the decoder's fields as their descriptors: the compiled start copies a template's decoder through
# them (the class's own `__slots__`, so no name of them is written in C)
_DECODER_FIELDS = tuple(ByteTextDecoder.__dict__[name] for name in ByteTextDecoder.__slots__)
assert ByteTextDecoder.__bases__ == (object,)  # (every field is one of its own slots)


def _has_stop_rules(p: DecodeParams) -> bool:
    return bool(p.stop or p.min_tokens or p.stop_token_ids or p.visible_stop_token_ids or p.include_stop_str_in_output)


def _plain_template(plan: DecodePlan, p: DecodeParams, ignore_eos: bool) -> tuple[object, ...] | None:
    """What every plain stream of a decode mode starts from (`StreamCore._open_plain`'s tuple), made
    once per (mode, ignore_eos) and kept on the plan; None where the mode has no byte table."""
    key = (p.skip_special_tokens, p.spaces_between_special_tokens, ignore_eos)
    template = plan.plain_templates.get(key, _NO_TEMPLATE)
    if template is not _NO_TEMPLATE:
        return template  # type: ignore[return-value]
    tables = plan.tables(key[0], key[1]) if plan.strategy == "bytes" else None
    template = None if tables is None else (
        (ByteTextDecoder.holding_nothing(tables), _DECODER_FIELDS), tables.texts,
        tables.pieces if tables.raw_added is None else None,  # (raw-added: an added id's text is Python's job)
        tables.deltas, _NO_IDS if ignore_eos else plan.eos_ids, _NO_IDS, plan.vocab_size,
        tables.strip_leading_space, CONTEXT_TOKENS, tables.vocab_size)
    plan.plain_templates[key] = template
    return template


def _py_whole_tail(texts: list[str | None], context: Sequence[int], n: int, max_context: int) -> bool:
    tail = context[-max_context:]
    return bool(tail) and ends_whole(texts, tail, n)


try:  # the compiled start, one-id step and end (optional extension)
    from detok._native._streamcore import StreamCore as _StreamCore
    from detok._native._streamcore import StreamMaker as _StreamMaker
    from detok._native._streamcore import configure_stream as _configure_stream
except ImportError:  # pragma: no cover - depends on the build
    _StreamCore = PythonStreamCore  # type: ignore[misc,assignment]
    _StreamMaker = None
    _configure_stream = None


