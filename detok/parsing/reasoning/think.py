"""The start/end marker families (`<think>`...`</think>`, `[THINK]`...`[/THINK]`): one state machine,
the families differ only in their markers and defaults.

States: before reasoning (content; the start marker opens reasoning), reasoning (the end marker closes
it), pending (an implicit end such as Qwen3.5's `<tool_call>` inside reasoning, waiting for the text that
confirms it) and after (content; a start marker opens reasoning again in `reopen` families, as vLLM's
GLM and Mistral configs).

The reasoning markers' text never reaches reasoning or content: the start marker is dropped (also
repeated inside reasoning, and in the answer of a family that does not reopen, where the peers pass it
on as text), the end marker is dropped, a stray end marker outside reasoning is dropped (vLLM's engine
absorbs it). An implicit end marker is kept and goes to content, where the tool parser
needs it. A marker that is one token of
the tokenizer is recognised only as a marker `Piece` (by id, never split); a marker that is plain text
of this tokenizer is found in the text, holding back only a tail that could still become one.
"""

from __future__ import annotations

import re
from typing import ClassVar

from detok.parsing.base import ReasoningParser
from detok.parsing.holdback import earliest, partial_suffix_len
from detok.parsing.types import Piece

_BEFORE, _REASONING, _PENDING, _AFTER = range(4)

# How much text after an implicit end marker is awaited for its confirmation (vLLM looks 8 tokens
# ahead): whitespace beyond this without the confirming text means it was a mention in reasoning.
# Decided on this window of the text alone, so the result does not depend on how it was cut.
IMPLICIT_END_LOOKAHEAD = 256


class ThinkParser(ReasoningParser):
    start: ClassVar[str] = "<think>"
    end: ClassVar[str] = "</think>"
    # a marker that ends reasoning without the end marker and stays in the content (a tool-call opener)
    implicit_end: ClassVar[str | None] = None
    # if set, the implicit end counts only when the text after it (leading whitespace skipped) matches
    # this; `implicit_confirm_prefix` is the text such a match starts with (to know when to give up)
    implicit_confirm: ClassVar[re.Pattern[str] | None] = None
    implicit_confirm_prefix: ClassVar[str] = ""
    default_starts_in_reasoning: ClassVar[bool] = False
    # True: a start marker in the answer opens another reasoning block (vLLM's glm47 / mistral engine
    # configs: CONTENT + THINK_START -> REASONING); False: it is answer text
    reopen: ClassVar[bool] = False

    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        sir = self.default_starts_in_reasoning if starts_in_reasoning is None else starts_in_reasoning
        self._state = _REASONING if sir else _BEFORE
        imp = self.implicit_end
        # the markers matched in text (not single tokens here), per state
        text_start = () if self.start in token_markers else (self.start,)
        text_end = () if self.end in token_markers else (self.end,)
        text_imp = () if imp is None or imp in token_markers else (imp,)
        self._live = {
            _BEFORE: text_start + text_end,
            _REASONING: text_start + text_end + text_imp,
            _AFTER: text_start + text_end,
        }
        self._imp_piece = Piece(imp, imp if imp in token_markers else None) if imp else None
        self._held = ""  # a tail of text that may still become a text marker
        self._pending = ""  # text after an unconfirmed implicit end
        self._r: list[str] = []
        self._c: list[Piece] = []
        self._quiet = not self._live[self._state]  # no text can hold a marker now: the fast path
        # first characters of each state's text markers: text without them holds no marker
        self._firsts = {st: "".join(sorted({m[0] for m in live})) for st, live in self._live.items()}

    def _settle(self) -> None:
        st = self._state
        self._quiet = st != _PENDING and not self._held and not self._live[st]

    # ---- the interface ------------------------------------------------------------------------
    def feed(self, piece: Piece) -> tuple[str, list[Piece]]:
        if piece.marker is None:
            st = self._state
            if self._quiet:  # the common case: no marker can be in this state's text
                return (piece.text, []) if st == _REASONING else ("", [piece])
            if st != _PENDING and not self._held:  # text markers: a text without their first chars
                text = piece.text
                for c in self._firsts[st]:
                    if c in text:
                        break
                else:
                    return (text, []) if st == _REASONING else ("", [piece])
            self._text(piece.text)
        else:
            self._marker(piece)
        self._settle()
        return self._out()

    def finish(self) -> tuple[str, list[Piece]]:
        if self._state == _PENDING:  # never confirmed: it was reasoning (vLLM)
            self._r.append(self.implicit_end or "")
            self._r.append(self._pending)
            self._pending = ""
            self._state = _REASONING
        if self._held:
            self._emit(self._held)
            self._held = ""
        self._settle()
        return self._out()

    # ---- the machine --------------------------------------------------------------------------
    def _out(self) -> tuple[str, list[Piece]]:
        r, c = self._r, self._c
        if not r and not c:
            return "", []
        self._r, self._c = [], []
        return "".join(r), c

    def _emit(self, text: str) -> None:
        if not text:
            return
        if self._state == _REASONING:
            self._r.append(text)
        else:
            self._c.append(Piece(text))

    def _text(self, text: str) -> None:
        if self._state == _PENDING:
            self._pending_text(text)
            return
        if not self._held and not any(c in text for c in self._firsts[self._state]):
            self._emit(text)
            return
        buf = self._held + text
        self._held = ""
        while buf:
            if self._state == _PENDING:
                self._pending_text(buf)
                return
            live = self._live[self._state]
            if not live:
                self._emit(buf)
                return
            pos, m = earliest(buf, live)
            if m is None:
                keep = partial_suffix_len(buf, live)
                self._emit(buf[: len(buf) - keep])
                self._held = buf[len(buf) - keep :]
                return
            self._emit(buf[:pos])
            buf = buf[pos + len(m) :]
            self._on_marker(Piece(m))

    def _marker(self, piece: Piece) -> None:
        if self._held:  # a marker token follows: the held tail can no longer become a marker
            held, self._held = self._held, ""
            self._emit(held)
        if self._state == _PENDING:  # anything but text cannot confirm the implicit end
            self._reject_pending()
        self._on_marker(piece)

    def _on_marker(self, piece: Piece) -> None:
        m, st = piece.text, self._state
        if m == self.start:
            if st == _BEFORE or (st == _AFTER and self.reopen):
                self._state = _REASONING
            # a repeated start inside reasoning is dropped, and so is one in the answer of a family
            # that does not reopen (marker text never reaches content)
        elif m == self.end:
            if st == _REASONING:
                self._state = _AFTER
            # a stray end outside reasoning is dropped (vLLM's engine absorbs it)
        elif m == self.implicit_end:
            if st != _REASONING:
                self._c.append(piece)
            elif self.implicit_confirm is None:
                self._state = _AFTER
                self._c.append(piece)
            else:
                self._state = _PENDING
                self._pending = ""
        elif st == _REASONING:  # another parser's marker (a tool marker) inside reasoning
            self._r.append(m)
        else:
            self._c.append(piece)

    def _pending_text(self, text: str) -> None:
        self._pending += text
        window = self._pending[:IMPLICIT_END_LOOKAHEAD]
        after = window.lstrip()
        confirm = self.implicit_confirm
        assert confirm is not None and self._imp_piece is not None
        if confirm.match(after):
            rest, self._pending = self._pending, ""
            self._state = _AFTER
            self._c.append(self._imp_piece)
            self._text(rest)  # scanned as answer text (a text end marker in it is dropped there too)
            return
        full = len(window) == IMPLICIT_END_LOOKAHEAD
        if not full and (not after or self.implicit_confirm_prefix.startswith(after)):
            return  # could still be confirmed
        self._reject_pending()

    def _reject_pending(self) -> None:
        """The implicit end was a mention inside reasoning: it and the text after it are reasoning
        (the text is scanned again, it may hold an end marker)."""
        rest, self._pending = self._pending, ""
        self._state = _REASONING
        self._r.append(self.implicit_end or "")
        if rest:
            self._text(rest)
