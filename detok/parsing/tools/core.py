"""What every tool-call family shares: marker detection in text, call emission, the calls limit.

A family is a small state machine over two kinds of events: a marker (a one-token marker fed as a
marker piece by the worker, or a marker found in the text when this tokenizer has it as plain text)
and plain text. `MarkerSplitter` finds the text markers and holds back only a suffix that could still
become one. `StreamingToolParser` turns the family's decisions into deltas with the streaming
contract: the first delta of a call carries its id and name, the later ones only argument text, and
the argument fragments of one index join to the call's JSON arguments (`"{}"` when it had none).

Common rules of all families (docs/reasoning-and-tools.md states them):
- A call whose function name is not among the request's tools is emitted as the model wrote it (as
  vLLM's parsers do; SGLang drops it). The client validates the name.
- At most `MAX_TOOL_CALLS` calls per response are emitted; the text of later calls is parsed and
  dropped (neither calls nor content), so the response stays bounded.
- Whitespace between and after calls is dropped; other text outside calls is content.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

from detok.parsing.base import ToolParser
from detok.parsing.limits import MAX_TOOL_CALLS
from detok.parsing.malformed import log_malformed
from detok.parsing.tools.json_stream import SAFE_IN_STRING, JsonValueStream
from detok.parsing.types import KIND_ARGUMENTS, KIND_CONTENT, Piece, Steady, ToolCallDelta, ToolSpec



class TextSink:
    """`_current_sink()`'s answer when the family streams a string value of its own (`_fast_text`)."""


TEXT_SINK = TextSink()


class MarkerSplitter:
    """Cuts plain text at the given text markers; holds back a suffix that is a proper prefix of
    one of them until the next text decides it."""

    __slots__ = ("_pattern", "_prefixes", "_longest", "_firsts", "_held", "hot")

    def __init__(self, markers: Iterable[str], hot: str = "") -> None:
        found = sorted({m for m in markers if m}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, found))) if found else None
        self._prefixes = {m[:k] for m in found for k in range(1, len(m))}
        self._longest = max((len(m) for m in found), default=0)
        self._firsts = "".join(sorted({m[0] for m in found}))
        self._held = ""
        # characters that may start a marker or an opener (`hot`: the family's own, e.g. `{`)
        self.hot = "".join(sorted(set(self._firsts + hot)))

    @property
    def firsts(self) -> str:
        """The text markers' first characters (`hot` without the family's own characters)."""
        return self._firsts

    def quiet(self, text: str) -> bool:
        """Nothing held and no character of `text` could start a marker or opener: plain text."""
        if self._held:
            return False
        for c in self.hot:
            if c in text:
                return False
        return True

    def feed(self, text: str) -> list[tuple[str | None, str]]:
        """Events (marker, text): marker None for plain text."""
        buf = self._held + text if self._held else text
        self._held = ""
        if self._pattern is None:
            return [(None, buf)] if buf else []
        events: list[tuple[str | None, str]] = []
        pos = 0
        for m in self._pattern.finditer(buf):
            if m.start() > pos:
                events.append((None, buf[pos : m.start()]))
            events.append((m.group(), m.group()))
            pos = m.end()
        keep = self._partial(buf, pos)
        end = len(buf) - keep
        if end > pos:
            events.append((None, buf[pos:end]))
        if keep:
            self._held = buf[end:]
        return events

    def _partial(self, buf: str, pos: int) -> int:
        tail_start = max(pos, len(buf) - self._longest + 1)
        # fast path: no marker's first character near the end
        for k in range(len(buf) - tail_start, 0, -1):
            if buf[len(buf) - k] in self._firsts and buf[len(buf) - k :] in self._prefixes:
                return k
        return 0

    def flush(self) -> list[tuple[str | None, str]]:
        held, self._held = self._held, ""
        return [(None, held)] if held else []


class StreamingToolParser(ToolParser):
    """Base of the families: subclasses implement `_on_marker`, `_on_text` and `_on_finish`, calling
    `_content`, `_open_call`, `_args` and `_close_call`."""

    # markers looked for in the text even when the tokenizer has them as tokens (e.g. `<function=`)
    text_markers: ClassVar[tuple[str, ...]] = ()
    # the class attributes holding the grammar's terminals besides `start` and `end` (a family's table
    # may set each; `detok.parsing.family_table` lists them as the family's markers)
    terminal_names: ClassVar[tuple[str, ...]] = ()
    # characters dropped between and after calls (when nothing else follows before the next call)
    separators: ClassVar[str] = " \t\n\r"
    # characters that may open a call in content besides the markers (llama3_json's `{`)
    hot_chars: ClassVar[str] = ""
    # what a family's own string value holds back at its end (`Steady.value`), if it has such values
    value_hold: ClassVar[str] = ""
    # families keep their state here; 0 means "in content: text is content as it is"
    _state: int = 0
    # while `_on_marker` runs: the text the decoder gave for that marker (its own, or "" where
    # skip_special_tokens skipped it), for a family that passes a marker on as text (llama3_json)
    _marker_text: str = ""

    def __init__(
        self,
        *,
        tools: Sequence[ToolSpec],
        token_markers: frozenset[str],
        call_id: Callable[[int], str],
    ) -> None:
        self.tools = {t.name: t for t in tools}
        self.token_markers = token_markers
        self._call_id = call_id
        searched = [m for m in self.markers if m not in token_markers] + list(self.text_markers)
        self._splitter = MarkerSplitter(searched, self.hot_chars)
        self._out_content: list[str] = []
        self._out_calls: list[ToolCallDelta] = []
        self._calls = 0  # calls opened (emitted or dropped over the limit)
        self._in_call = False
        self._dropping = False
        self._args_sent = False
        self._idle_space = ""  # whitespace after a call, dropped unless content follows
        self._after_call = False
        # the JSON stream whose string text goes straight into the open call's arguments, or
        # TEXT_SINK for a family's own string value (fast paths)
        self._sink: JsonValueStream | TextSink | None = None
        self._steady_content = Steady(KIND_CONTENT, self._splitter.hot)
        self._steady_args = Steady(KIND_ARGUMENTS, self._splitter.hot, json_string=True)
        # a family's own string value (XML formats): escaped on the way, trailing whitespace held
        self._steady_value = Steady(KIND_ARGUMENTS, self._splitter.hot, value=self.value_hold)

    # ---- the ToolParser interface ------------------------------------------------------------
    def feed(self, piece: Piece) -> tuple[str, list[ToolCallDelta]]:
        if piece.marker is None:  # the common cases first: plain content, more of a string argument
            text = piece.text
            sink = self._sink
            if sink is None:
                if self._state == 0 and not self._after_call:
                    splitter = self._splitter  # `quiet`, inlined: this is every content token's path
                    if not splitter._held:
                        for c in splitter.hot:
                            if c in text:
                                break
                        else:
                            return text, []
            elif sink is TEXT_SINK:  # a family's own string value (XML formats)
                if self._splitter.quiet(text):
                    out = self._fast_text(text)
                    if out is not None:
                        if not out or self._dropping:
                            return "", []
                        self._args_sent = True
                        return "", [ToolCallDelta(self._calls - 1, None, None, out)]
            elif (sink._in_string and not sink._held and '"' not in text and "\\" not in text
                  and text.isprintable() and self._splitter.quiet(text)):
                # inside a JSON string, no quote, backslash or control character: the stream would
                # pass the text on unchanged and keep its state (what `STRING_RUN` matches)
                if not text or self._dropping:
                    return "", []
                self._args_sent = True
                return "", [ToolCallDelta(self._calls - 1, None, None, text)]
            elif (sink._in_string and SAFE_IN_STRING.fullmatch(sink._held + text if sink._held else text)
                  and self._splitter.quiet(text)):
                # escapes (maybe the end of one held back), no closing quote: the stream stays inside
                # the string and cannot fail, so the family's slow path would only pass on its output
                out, _ = sink.feed(text)
                if not out or self._dropping:
                    return "", []
                self._args_sent = True
                return "", [ToolCallDelta(self._calls - 1, None, None, out)]
        if piece.marker is not None:
            events = self._splitter.flush()
            events.append((piece.marker, piece.text))
        elif self._splitter.quiet(piece.text):  # no marker can start in it: one text event
            events = [(None, piece.text)]
        else:
            events = self._splitter.feed(piece.text)
        for marker, text in events:
            if marker is None:
                self._on_text(text)
            else:
                self._marker_text = text
                self._on_marker(marker)
        self._sink = self._current_sink()
        return self._take()

    def steady(self) -> Steady | None:
        # exactly `feed`'s fast paths for plain content and for a JSON string argument
        splitter = self._splitter
        if splitter._held:
            return None
        sink = self._sink
        if sink is None:
            return self._steady_content if self._state == 0 and not self._after_call else None
        if self._dropping or not self._args_sent:
            return None  # (`_args_sent`: the fast paths set it; a string argument follows sent text)
        if sink is TEXT_SINK:
            return self._steady_value if self._text_value_steady() else None
        if not sink._in_string or sink._held:
            return None
        return self._steady_args

    def resume_held(self, text: str) -> None:
        """See `OutputParser.resume_held`."""
        sink = self._sink
        if isinstance(sink, JsonValueStream):
            if text != "\\":
                raise ValueError(f"a JSON string holds no {text!r}")
            sink.resume_escaped()
        else:
            self._resume_held_value(text)

    def _resume_held_value(self, text: str) -> None:
        """In a steady string value, the compiled path held back `text` (whitespace) at its end."""
        raise NotImplementedError

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        for marker, text in self._splitter.flush():
            self._on_text(text)
        self._on_finish()
        if self._in_call:
            self._close_call()
        return self._take()

    @property
    def calls_emitted(self) -> int:
        return min(self._calls, MAX_TOOL_CALLS)

    # ---- for the families --------------------------------------------------------------------
    def _on_marker(self, marker: str) -> None:
        raise NotImplementedError

    def _on_text(self, text: str) -> None:
        raise NotImplementedError

    def _on_finish(self) -> None:
        """End of output: close what is open (the base closes an open call after this)."""

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        """The JSON stream whose string text would pass straight into the open call's arguments
        now, or TEXT_SINK when `_fast_text` may take the text (enables the fast paths; the slow
        path gives the same result)."""
        return None

    def _text_value_steady(self) -> bool:
        """Whether `_fast_text` would now take any text without a marker character and without
        whitespace at its end, giving its JSON string body, leaving the family's state unchanged."""
        return False

    def _fast_text(self, text: str) -> str | None:
        """The argument text for `text` (no marker character in it) when the family can take it
        without its state machine, else None (the slow path runs)."""
        return None

    def _content(self, text: str) -> None:
        """Text outside calls: whitespace right after a call is held and dropped if another call or
        the end follows."""
        if not text:
            return
        if self._after_call:
            if not text.strip(self.separators):
                self._idle_space += text
                return
            text = self._idle_space + text
            self._idle_space = ""
            self._after_call = False
        self._out_content.append(text)

    def _call_id_for(self, index: int) -> str:
        return self._call_id(index)

    def _open_call(self, name: str, native_id: str | None = None) -> None:
        if self._in_call:
            self._close_call()
        index = self._calls
        self._calls += 1
        self._in_call = True
        self._args_sent = False
        self._idle_space = ""
        self._after_call = False
        self._dropping = index >= MAX_TOOL_CALLS
        if index == MAX_TOOL_CALLS:
            log_malformed(f"more than {MAX_TOOL_CALLS} calls in one response", "later calls are parsed and dropped")
        if not self._dropping:
            call_id = native_id if native_id is not None else self._call_id_for(index)
            self._out_calls.append(ToolCallDelta(index, call_id, name))

    def _args(self, text: str) -> None:
        if not text or not self._in_call:
            return
        self._args_sent = True
        if self._dropping:
            return
        index = self._calls - 1
        calls = self._out_calls
        if calls and calls[-1].index == index and calls[-1].name is None:  # join fragments of one feed
            calls[-1] = ToolCallDelta(index, None, None, calls[-1].arguments + text)
        else:
            calls.append(ToolCallDelta(index, None, None, text))

    def _close_call(self) -> None:
        if not self._in_call:
            return
        if not self._args_sent:
            self._args("{}")
        self._in_call = False
        self._after_call = True

    def _take(self) -> tuple[str, list[ToolCallDelta]]:
        content = "".join(self._out_content) if self._out_content else ""
        calls = self._out_calls
        self._out_content = []
        self._out_calls = []
        return content, calls
