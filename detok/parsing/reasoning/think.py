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
from detok.parsing.holdback import find_all, partial_suffix_len
from detok.parsing.types import KIND_CONTENT, KIND_REASONING, Piece, Steady

_BEFORE, _REASONING, _PENDING, _AFTER = range(4)
_TABLES: dict[tuple[type, frozenset[str], str | None], tuple] = {}  # (family, marker tokens, implicit end) -> tables

# How much text after an implicit end marker is awaited for its confirmation (vLLM looks 8 tokens
# ahead): whitespace beyond this without the confirming text means it was a mention in reasoning.
# Decided on this window of the text alone, so the result does not depend on how it was cut.
IMPLICIT_END_LOOKAHEAD = 256


class ThinkParser(ReasoningParser):
    start: ClassVar[str] = "<think>"
    end: ClassVar[str] = "</think>"
    # a marker that ends reasoning without the end marker and stays in the content (a tool-call opener)
    implicit_end: ClassVar[str | None] = None
    # tool-call starts that take `implicit_end`'s place when the request's tool parser opens its calls
    # with one (DeepSeek V3.2 / V4 write DSML regions where V3.1 wrote its calls section)
    tool_implicit_ends: ClassVar[tuple[str, ...]] = ()
    # if set, the implicit end counts only when the text after it (leading whitespace skipped) matches
    # this; `implicit_confirm_prefixes` are the texts such a match starts with (to know when to give up)
    implicit_confirm: ClassVar[re.Pattern[str] | None] = None
    implicit_confirm_prefixes: ClassVar[tuple[str, ...]] = ()
    default_starts_in_reasoning: ClassVar[bool] = False
    # True: a start marker in the answer opens another reasoning block (vLLM's glm47 / mistral engine
    # configs: CONTENT + THINK_START -> REASONING); False: it is answer text
    reopen: ClassVar[bool] = False

    def __init__(self, *, starts_in_reasoning: bool | None, token_markers: frozenset[str]) -> None:
        sir = self.default_starts_in_reasoning if starts_in_reasoning is None else starts_in_reasoning
        self._state = _REASONING if sir else _BEFORE
        # what depends only on the family and the tokenizer's marker tokens: made once, shared
        self._token_markers = token_markers
        self._live, self._text_markers, self._firsts, self._steadies = self._tables(token_markers, self.implicit_end)
        self._held = ""  # a tail of text that may still become a text marker
        self._pending = ""  # text after an unconfirmed implicit end
        self._imp_at: Piece | None = None  # that implicit end's piece (its text: "" if the decoder skipped it)
        self._r: list[str] = []
        self._c: list[Piece] = []
        self._quiet = not self._live[self._state]  # no text can hold a marker now: the fast path

    def follow_tools(self, tool_markers: frozenset[str]) -> None:
        for marker in self.tool_implicit_ends:
            if marker in tool_markers:
                self.implicit_end = marker  # type: ignore[misc]  # (this request's, over the class's)
                self._live, self._text_markers, self._firsts, self._steadies = self._tables(self._token_markers, marker)
                self._settle()
                return

    @classmethod
    def _tables(cls, token_markers: frozenset[str], imp: str | None) -> tuple[dict[int, tuple[str, ...]], tuple[str, ...],
                                                                             dict[int, str], dict[int, Steady]]:
        key = (cls, token_markers, imp)
        tables = _TABLES.get(key)
        if tables is not None:
            return tables
        # the markers matched in text (not single tokens here), per state
        text_start = () if cls.start in token_markers else (cls.start,)
        text_end = () if cls.end in token_markers else (cls.end,)
        text_imp = () if imp is None or imp in token_markers else (imp,)
        live = {
            _BEFORE: text_start + text_end,
            _REASONING: text_start + text_end + text_imp,
            _AFTER: text_start + text_end,
        }
        text_markers = text_start + text_end + text_imp  # searched once per text
        # first characters of each state's text markers: text without them holds no marker
        firsts = {st: "".join(sorted({m[0] for m in markers})) for st, markers in live.items()}
        steadies = {st: Steady(KIND_REASONING if st == _REASONING else KIND_CONTENT, f) for st, f in firsts.items()}
        if len(_TABLES) >= 256:
            _TABLES.clear()
        tables = _TABLES[key] = (live, text_markers, firsts, steadies)
        return tables

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

    def steady(self) -> Steady | None:
        # what `feed`'s two fast paths take: no implicit end pending, nothing held
        if self._state == _PENDING or self._held:
            return None
        return self._steadies[self._state]

    def finish(self) -> tuple[str, list[Piece]]:
        if self._state == _PENDING:  # never confirmed: it was reasoning (vLLM)
            self._r.append(self._pending_marker_text())
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
        """Scan text in the current state: markers act on the state as they come (each found once,
        `find_all`), text is emitted or, at the end, held if it may still become a marker."""
        if self._state == _PENDING:  # an implicit end from an earlier piece awaits this text
            buf, self._pending = self._pending + text, ""
            if not self._settle_implicit_end(buf, 0):
                self._pending = buf
                return
        elif not self._held and not any(c in text for c in self._firsts[self._state]):
            self._emit(text)
            return
        else:
            buf, self._held = self._held + text, ""
        i = 0
        for pos, m in find_all(buf, self._text_markers):
            if pos < i or m not in self._live[self._state]:
                continue  # inside text already taken, or not a marker in this state: text
            self._emit(buf[i:pos])
            i = pos + len(m)
            self._on_marker(Piece(m))
            if self._state == _PENDING and not self._settle_implicit_end(buf, i):
                self._pending = buf[i:]  # short: less than the lookahead window
                return
        rest = buf[i:]
        keep = partial_suffix_len(rest, self._live[self._state])
        self._emit(rest[: len(rest) - keep])
        self._held = rest[len(rest) - keep :]

    def _settle_implicit_end(self, buf: str, i: int) -> bool:
        """Decide the implicit end whose text starts at buf[i] (looking at most
        IMPLICIT_END_LOOKAHEAD characters ahead): confirmed, the state is the answer's and the
        implicit marker goes to content; a mention, it is reasoning. The text from i is then scanned
        in the new state by the caller. False: undecided (the text is short), nothing changed."""
        window = buf[i : i + IMPLICIT_END_LOOKAHEAD]
        after = window.lstrip()
        confirm = self.implicit_confirm
        assert confirm is not None and self._imp_at is not None
        if confirm.match(after):
            self._state = _AFTER
            self._c.append(self._imp_at)  # for the tool parser: by id if it was a marker token
            self._imp_at = None
            return True
        full = len(window) == IMPLICIT_END_LOOKAHEAD
        if not full and (not after or any(p.startswith(after) for p in self.implicit_confirm_prefixes)):
            return False  # could still be confirmed
        self._state = _REASONING
        self._r.append(self._pending_marker_text())
        return True

    def _marker(self, piece: Piece) -> None:
        if self._held:  # a marker token follows: the held tail can no longer become a marker
            held, self._held = self._held, ""
            self._emit(held)
        if self._state == _PENDING:  # a marker token cannot confirm the implicit end: a mention
            rest, self._pending = self._pending, ""
            self._state = _REASONING
            self._r.append(self._pending_marker_text())
            if rest:
                self._text(rest)
        self._on_marker(piece)

    def _pending_marker_text(self) -> str:
        """The text of the implicit end awaiting confirmation, now known to be reasoning."""
        imp, self._imp_at = self._imp_at, None
        return imp.text if imp is not None else ""

    def _on_marker(self, piece: Piece) -> None:
        # told apart by the marker; the text passed on is the piece's (none where it was skipped)
        m, st = (piece.text if piece.marker is None else piece.marker), self._state
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
                self._imp_at = piece
        elif st == _REASONING:  # another parser's marker (a tool marker) inside reasoning
            self._r.append(piece.text)
        else:
            self._c.append(piece)
