"""One request's incremental decode with its stop rules (docs/tokenizers.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from detok.stream.byte_text import ByteTextDecoder, OutOfVocabulary
from detok.wire.params import EMPTY_DELTA, DecodeParams, Delta, Finish, FinishReason
from detok.stream.stop_strings import StopStringMatcher
from detok.stream.strategy import DecodePlan, Strategy, prepare_decoding
from detok.stream.stream_core import (
    _ENDED,
    _NO_IDS,
    _NO_TEMPLATE,
    CONTEXT_TOKENS,
    _has_stop_rules,
    _plain_template,
    _configure_stream,
    _StreamCore,
    _StreamMaker,
)
from detok.tokenizer.base import Tokenizer

__all__ = ["CONTEXT_TOKENS", "DecodeStream"]
_DEFAULT_PARAMS = DecodeParams()


class DecodeStream(_StreamCore):  # type: ignore[misc,valid-type]
    """Turns a request's token ids into text deltas, one scheduler step at a time.

    Text is emitted in the step whose token completes it, except an incomplete UTF-8 tail and the
    longest suffix that is a proper prefix of a stop string. The concatenated deltas do not depend
    on how the tokens are grouped into steps.

    `step` takes a list of ids or one int id (no list to build per token). A plain stream's
    one-id step is a table lookup in compiled code (`_plainstep.StreamCore`, the base class, which
    holds `num_tokens`, `char_offset` and `finished`); everything else is `_step_py`.
    """

    __slots__ = ()  # (its fields are the base class's: `_StreamCore` / `PythonStreamCore`)
    # False for subclasses whose steps must always go through `step` (typed output): the table
    # never puts them on its compiled plain path
    columnar: ClassVar[bool] = True

    def __init__(
        self,
        tokenizer: Tokenizer,
        context_ids: Sequence[int] = (),
        params: DecodeParams | None = None,
        *,
        ignore_eos: bool = False,
        strategy: Strategy | None = None,
    ) -> None:
        p = params or _DEFAULT_PARAMS
        plan = prepare_decoding(tokenizer, strategy)
        if type(context_ids) not in (list, tuple):
            context_ids = list(context_ids)  # (once: an iterator is read by both set-up paths)
        if not _has_stop_rules(p):
            if self._init_plain(plan, p, context_ids, ignore_eos):
                return
        self._vocab = plan.vocab_size
        self.num_tokens = 0
        self.char_offset = 0
        self.finished = False
        self.stop_kind: str | None = None
        if p.stop_token_ids or p.visible_stop_token_ids or p.include_stop_str_in_output:
            self._visible = frozenset(p.visible_stop_token_ids)
            hidden = frozenset(p.stop_token_ids) if ignore_eos else plan.eos_ids.union(p.stop_token_ids)
            if p.include_stop_str_in_output:
                # vLLM v1: the text of the stop id or EOS that ends the request is kept, and, like
                # any text, matched against the stop strings
                self._visible, hidden = self._visible | hidden, _NO_IDS
            self._hidden = hidden - self._visible
            self._stop_ids = self._hidden | self._visible
        else:  # the common case: shared sets, nothing built per request
            self._visible = _NO_IDS
            self._hidden = self._stop_ids = _NO_IDS if ignore_eos else plan.eos_ids
        self._min_tokens = p.min_tokens
        self._stop = StopStringMatcher(p.stop, p.include_stop_str_in_output) if p.stop else None
        # (the one-id shortcut takes text that cannot begin a stop string while none is partly matched)
        self._firsts = self._stop.firsts_text if self._stop is not None else None
        self._plain = self._stop is None and p.min_tokens == 0
        self._pending_error: OutOfVocabulary | None = None
        ctx = (context_ids if type(context_ids) is list else list(context_ids))[-CONTEXT_TOKENS:]
        try:
            self._text = plan.text_decoder(p.skip_special_tokens, p.spaces_between_special_tokens, ctx)
        except OutOfVocabulary as e:
            # A bad prompt tail is this request's error, reported at its first step.
            self._text = plan.text_decoder(p.skip_special_tokens, p.spaces_between_special_tokens, ())
            self._pending_error = e
            self._plain = False
        self._stops = self._stop_ids
        dec = self._text
        if type(dec) is ByteTextDecoder and self.columnar:  # (typed output steps its own text)
            self._texts = dec._texts
            self._deltas = dec._t.deltas
            # raw-added mode: an added id's text depends on the id before it (Python's job)
            self._pieces = dec._t.pieces if dec._t.raw_added is None else None
            if self._plain and not dec._strip:  # (`_refresh`, inline: this runs once per request)
                self._held = dec._pending
                self._fast = True
                return
        else:
            self._texts = self._pieces = self._deltas = None
        self._refresh()

    def _init_plain(self, plan: DecodePlan, p: DecodeParams, context_ids: Sequence[int], ignore_eos: bool) -> bool:
        """`__init__`'s common case in fewer steps (every request pays it): no stop rule, a byte
        table, and a prompt tail that leaves nothing held (it ends in whole characters, or is empty
        with no leading space to strip). False, with nothing set, for anything else."""
        template = plan.plain_templates.get((p.skip_special_tokens, p.spaces_between_special_tokens, ignore_eos),
                                            _NO_TEMPLATE)
        if template is _NO_TEMPLATE:
            template = _plain_template(plan, p, ignore_eos)
        if template is None or not self.columnar:
            return False
        return self._open_plain(template, context_ids)  # type: ignore[no-any-return]

    @classmethod
    def opener(
        cls,
        tokenizer: Tokenizer,
        params: DecodeParams | None = None,
        *,
        ignore_eos: bool = False,
        strategy: Strategy | None = None,
    ) -> Callable[[Sequence[int]], DecodeStream]:
        """A maker of streams of one tokenizer and params, for an engine that opens one per request:
        `opener(tokenizer, params)(context_ids)` is `cls(tokenizer, context_ids, params, ...)`, the
        same stream, but a plain one (no stop rule, a byte table, a prompt tail ending in whole
        characters) is made in compiled code without running `__init__` (the tokenizer's decode
        plan and tables are looked up once, here). Anything else goes through `cls(...)`."""

        def make(context_ids: Sequence[int] = ()) -> DecodeStream:
            return cls(tokenizer, context_ids, params, ignore_eos=ignore_eos, strategy=strategy)

        p = params or _DEFAULT_PARAMS
        if (_StreamMaker is None or not cls.columnar or _has_stop_rules(p)
                or cls.__init__ is not DecodeStream.__init__ or cls.__new__ is not DecodeStream.__new__):
            return make  # (a subclass's own set-up always runs)
        template = _plain_template(prepare_decoding(tokenizer, strategy), p, ignore_eos)
        return make if template is None else _StreamMaker(cls, make, template)  # type: ignore[no-any-return]

    def _refresh(self) -> None:
        """Hand the decoder's state to the compiled one-id step where it can go on from it: a
        plain stream whose byte decoder has no leading space to strip and is not after an added
        token. Its held bytes then live in `_held` (`_to_python` gives them back)."""
        dec = self._text
        stop = self._stop
        # (stop strings: while none is partly matched, the shortcut takes text that cannot begin one)
        steady = self._plain or (stop is not None and self._pending_error is None and stop.idle)
        if steady and not self.finished and self._texts is not None and not dec._strip and not dec._after_added:  # type: ignore[union-attr]
            self._held = dec._pending  # type: ignore[union-attr]
            self._fast = True
        else:
            self._fast = False

    def _to_python(self) -> None:
        """The compiled step's held bytes back into the decoder, before Python code steps it."""
        if self._fast:
            dec = self._text
            dec._pending = held = self._held  # type: ignore[union-attr]
            dec._fast = not (dec._strip or dec._after_added or held)  # type: ignore[union-attr]
            self._held = b""
            self._fast = False

    @property
    def held_bytes(self) -> bytes:
        """The bytes of an incomplete character held (byte-table decoding)."""
        if self._fast:
            return self._held
        dec = self._text
        return dec._pending if type(dec) is ByteTextDecoder else b""

    @property
    def holding_utf8(self) -> bool:
        return bool(self._held) if self._fast else self._text.holding

    @property
    def held_text(self) -> str:
        """Text held back because it may begin a stop string."""
        return self._stop.held if self._stop is not None else ""

    # ---- stepping ---------------------------------------------------------------------------
    def _step_py(self, token_ids: Sequence[int] | int) -> Delta:
        if self.finished:
            return EMPTY_DELTA
        if type(token_ids) is int:
            token_ids = [token_ids]
        self._to_python()
        delta = self._step_ids(token_ids)  # type: ignore[arg-type]
        self._refresh()
        return delta

    def _step_ids(self, token_ids: Sequence[int]) -> Delta:
        if self._plain and self._stop_ids.isdisjoint(token_ids):
            try:
                text = self._text.push(token_ids)
            except OutOfVocabulary:
                return self._step_checked(token_ids)  # emits the ids before the bad one, then the error
            self.num_tokens += len(token_ids)
            if text:
                self.char_offset += len(text)
                return Delta(text)
            return EMPTY_DELTA
        return self._step_checked(token_ids)

    def _step_checked(self, token_ids: Sequence[int]) -> Delta:
        if self._pending_error is not None:
            return self._end("error", text="", message=self._oov_message(self._pending_error))
        bad: int | None = None
        if token_ids and (min(token_ids) < 0 or max(token_ids) >= self._vocab):
            bad = next(k for k, i in enumerate(token_ids) if not 0 <= i < self._vocab)
            bad_id = token_ids[bad]
            token_ids = token_ids[:bad]
        # Tokens go one by one where a stop id, the min_tokens boundary or stop strings need it:
        # a stop string then ends the request at the very token that completes it, so the count
        # of tokens consumed (usage, logprob entries) does not depend on how the scheduler
        # grouped tokens into steps - nor on a replay, which sends them all in one row. Otherwise
        # a run of ordinary tokens is decoded in one piece.
        out: list[str] = []
        start = 0
        n = len(token_ids)
        one_by_one = self._stop is not None
        while start < n:
            if one_by_one or self.num_tokens < self._min_tokens or token_ids[start] in self._stop_ids:
                end = start + 1
            else:
                end = start
                while end < n and token_ids[end] not in self._stop_ids:
                    end += 1
            chunk = token_ids[start:end]
            start = end
            self.num_tokens += len(chunk)
            allow = self.num_tokens >= self._min_tokens
            # as vLLM v1: a stop string may not end in the text of the first min_tokens tokens
            allow_string = self.num_tokens > self._min_tokens
            last = chunk[-1]
            if allow and last in self._hidden:
                return self._end("stop", "".join(out), matched=last)
            text = self._text.push(chunk)
            if self._stop is not None:
                text, matched = self._stop.feed(text, allow_string)
                if matched is not None:
                    out.append(text)
                    return self._finished_by_string("".join(out), matched)
            out.append(text)
            if allow and last in self._visible:
                return self._end("stop", "".join(out), matched=last)
        if bad is not None:
            return self._end("error", "".join(out), message=self._oov_message(OutOfVocabulary(bad_id)))
        if self.num_tokens >= self._min_tokens:
            self._plain = self._stop is None and self._pending_error is None
        text = "".join(out)
        self.char_offset += len(text)
        return Delta(text) if text else EMPTY_DELTA

    def _finish_py(self, reason: FinishReason = "length", message: str | None = None) -> Delta:
        """`finish` (the base class's: a plain end that holds nothing is compiled): the scheduler
        ended the request, release what is held (incomplete bytes become U+FFFD)."""
        if self.finished:
            return EMPTY_DELTA
        if self._fast and not self._held:
            # a plain stream holding nothing: no text to release, no stop string to check (what
            # `_end` gives, without its flush)
            self.finished = True
            self._fast = False
            _decoder_flushed(self._text)
            delta = _ENDED.get(reason) if message is None and type(reason) is str else None
            return delta if delta is not None else Delta("", Finish(reason, None, message))
        self._to_python()
        return self._end(reason, "", message=message)

    # ---- ending -----------------------------------------------------------------------------
    def _end(self, reason: FinishReason, text: str, matched: str | int | None = None, message: str | None = None) -> Delta:
        tail = self._text.flush()
        if self._stop is not None:
            tail, hit = self._stop.feed(tail, self.num_tokens > self._min_tokens)
            if hit is not None and reason != "error":
                return self._finished_by_string(text + tail, hit)
            if hit is None:
                tail += self._stop.release()
            # (an error whose released text completes a stop string: the text ends at the stop
            # string, the finish stays the error, whose message is what the caller must see)
        if reason == "stop" and isinstance(matched, int):
            self.stop_kind = "token"
        text += tail
        self.finished = True
        self.char_offset += len(text)
        return Delta(text, Finish(reason, matched, message))

    def _finished_by_string(self, text: str, matched: str) -> Delta:
        self.finished = True
        self.stop_kind = "string"
        self.char_offset += len(text)
        return Delta(text, Finish("stop", matched))

    def _oov_message(self, e: OutOfVocabulary) -> str:
        return f"token id {e.token_id} is outside the vocabulary (size {self._vocab})"


def _decoder_flushed(dec: ByteTextDecoder) -> None:
    """A plain stream's decoder that held nothing, left as its flush leaves it (the compiled end
    of such a stream calls this too)."""
    dec._pending, dec._fast = b"", False


if _configure_stream is not None:  # the compiled core's results and the Python paths it falls back to
    _configure_stream(Delta, EMPTY_DELTA, _ENDED, DecodeStream._step_py, DecodeStream._finish_py, _decoder_flushed)
