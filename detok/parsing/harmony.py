"""Reading gpt-oss's Harmony format as it streams: messages, their channels and recipients.

A completion continues a prompt that ends with `<|start|>assistant`, so it reads
`<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>`;
a tool call is a message with a recipient: `<|channel|>commentary to=functions.NAME <|constrain|>json
<|message|>{...}<|call|>` (the recipient may also follow the role). The reader turns pieces into events:

- `Head`: a message's header is complete (at `<|message|>`): its channel, recipient, content type and
  the header's raw pieces (so a tool parser downstream can read the same message again);
- body text; a close (`<|end|>`, `<|call|>`, `<|return|>`, or implicit when a new header starts without
  one, as SGLang's reader allows); stray text outside any message (kept: never dropped).

Headers are held until `<|message|>` (a header is short); one cut short is dropped (vLLM has no
message for it), one longer than `HEADER_LIMIT` characters is not Harmony: its text is stray. Markers that are single tokens arrive as marker pieces;
others are matched in the text (`MarkerSplitter`), holding back only a possible marker prefix.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from detok.parsing.holdback import MarkerSplitter
from detok.parsing.types import Piece

START, CHANNEL, MESSAGE, END = "<|start|>", "<|channel|>", "<|message|>", "<|end|>"
CONSTRAIN, CALL, RETURN = "<|constrain|>", "<|call|>", "<|return|>"
MARKERS = (START, CHANNEL, MESSAGE, END, CONSTRAIN, CALL, RETURN)
CLOSERS = frozenset((END, CALL, RETURN))

# The longest header read as Harmony (role, channel, recipient, content type: tens of characters).
HEADER_LIMIT = 1024

_RECIPIENT = re.compile(r"to=([^\s<]+)")

FUNCTIONS = "functions."  # the recipient prefix of a call of the request's tools
# gpt-oss's built-in tools (vLLM's BUILTIN_TOOL_TO_MCP_SERVER_LABEL): never calls of the request's tools
BUILTIN_TOOLS = frozenset(("python", "browser", "container"))


def called_function(recipient: str | None, tool_names: frozenset[str]) -> str | None:
    """The function a message's recipient calls, or None: `functions.NAME` (NAME not empty), or a bare
    NAME of one of the request's tools (gpt-oss drops the prefix in long contexts; vLLM's
    is_function_recipient takes such calls, vLLM #42454), never a built-in tool (`python`,
    `browser.*`, `container.*`). (vLLM's Chat Completions path also takes a bare name it does not
    know; detok only the request's own.)"""
    if not recipient:
        return None
    if recipient.startswith(FUNCTIONS):
        return recipient[len(FUNCTIONS) :] or None
    if recipient in tool_names and recipient.split(".", 1)[0] not in BUILTIN_TOOLS:
        return recipient
    return None


class Head(NamedTuple):
    channel: str
    recipient: str | None
    content_type: str | None
    raw: list[Piece]  # the header as it arrived: opening marker, text, markers, <|message|>


# event kinds
HEAD, TEXT, CLOSE, STRAY = range(4)

_IDLE, _HEADER, _BODY = range(3)


def parse_head(parts: list[Piece], raw: list[Piece]) -> Head:
    """Channel, recipient and content type from a header's pieces (markers and text)."""
    role: list[str] = []
    channel: list[str] = []
    constrain: list[str] = []
    where = role
    for p in parts:
        if p.marker == CHANNEL:
            where = channel
        elif p.marker == CONSTRAIN:
            where = constrain
        elif p.marker is None:
            where.append(p.text)
    role_s, channel_s, constrain_s = "".join(role), "".join(channel), "".join(constrain)
    found = _RECIPIENT.search(channel_s) or _RECIPIENT.search(role_s)
    recipient = found.group(1) if found else None
    words = _RECIPIENT.sub(" ", channel_s).split()
    name = words[0] if words else ""
    ctype = " ".join(words[1:] + constrain_s.split()) or None
    return Head(name, recipient, ctype, raw)


class HarmonyReader:
    def __init__(self, token_markers: frozenset[str]) -> None:
        self._split = MarkerSplitter([m for m in MARKERS if m not in token_markers])
        self._tokens = token_markers
        self._state = _IDLE
        self._parts: list[Piece] = []  # the header so far (markers as marker pieces)
        self._raw: list[Piece] = []  # the same, as it arrived (for a downstream parser)
        self._header_len = 0
        # fast-path flags for the parsers, kept current by feed/finish: a text piece fed now is
        # that body's text unchanged (in_plain_body), or stray text unchanged (in_plain_idle)
        self.in_plain_body = False
        self.in_plain_idle = self._split.passthrough

    def _refresh(self) -> None:
        plain = self._split.passthrough
        self.in_plain_body = plain and self._state == _BODY
        self.in_plain_idle = plain and self._state == _IDLE

    def marker_piece(self, m: str) -> Piece:
        """A marker as this tokenizer has it: a marker piece if it is one token, else text."""
        return Piece(m, m if m in self._tokens else None)

    def feed(self, piece: Piece) -> list[tuple[int, object]]:
        out: list[tuple[int, object]] = []
        for p in self._split.feed(piece):
            self._step(p, out)
        self._refresh()
        return out

    def finish(self) -> list[tuple[int, object]]:
        out: list[tuple[int, object]] = []
        for p in self._split.finish():
            self._step(p, out)
        if self._state == _HEADER:
            self._abandon_header(out, keep_text=False)
        elif self._state == _BODY:
            out.append((CLOSE, None))
        self._state = _IDLE
        self._refresh()
        return out

    def _step(self, p: Piece, out: list[tuple[int, object]]) -> None:
        st, m = self._state, p.marker
        if m is None:
            if st == _BODY:
                out.append((TEXT, p.text))
            elif st == _HEADER:
                self._header_len += len(p.text)
                self._parts.append(p)
                self._raw.append(p)
                if self._header_len > HEADER_LIMIT:
                    self._abandon_header(out, keep_text=True)
            else:
                out.append((STRAY, p.text))
            return
        if m in (START, CHANNEL):
            if st == _BODY:  # a new header without a close: the message ends here
                out.append((CLOSE, None))
            elif st == _HEADER and m == START:
                self._abandon_header(out, keep_text=False)
            if st != _HEADER or m == START:
                self._open(p)
            else:  # <|channel|> inside a header
                self._parts.append(p)
                self._raw.append(self.marker_piece(m))
        elif m == MESSAGE:
            if st == _HEADER:
                self._raw.append(self.marker_piece(m))
                out.append((HEAD, parse_head(self._parts, self._raw)))
                self._state = _BODY
            # a <|message|> outside a header is dropped
        elif m == CONSTRAIN:
            if st == _HEADER:
                self._parts.append(p)
                self._raw.append(self.marker_piece(m))
        elif m in CLOSERS:
            if st == _BODY:
                out.append((CLOSE, m))
            elif st == _HEADER:
                self._abandon_header(out, keep_text=False)
            self._state = _IDLE
        else:  # another parser's marker piece: text of wherever it is
            self._step(Piece(p.text), out)

    def _open(self, p: Piece) -> None:
        self._state = _HEADER
        self._parts = [p]
        self._raw = [self.marker_piece(p.marker or "")]
        self._header_len = 0

    def _abandon_header(self, out: list[tuple[int, object]], keep_text: bool) -> None:
        """A header that never reached `<|message|>`: cut short (by the end of the output, a close or
        a new header) it is dropped, as vLLM's reader has no message for it; past `HEADER_LIMIT` it is
        not Harmony and its text (never its markers) is stray."""
        text = "".join(p.text for p in self._parts if p.marker is None)
        if text and keep_text:
            out.append((STRAY, text))
        self._parts, self._raw, self._header_len = [], [], 0
        self._state = _IDLE
