"""`deepseek_v3` and `deepseek_v31` (SGLang: `deepseekv3`, `deepseekv31`): DeepSeek's token-delimited
calls. All markers are single tokens of DeepSeek's vocabulary.

    V3:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
    V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>

The name goes out when it is complete (V3: at its newline, V3.1: at the separator); the arguments
stream as the model's raw JSON text (validated by `JsonValueStream`; text after the JSON before the
call's end marker, V3's closing fence, is not part of them).

Edges (docs/reasoning-and-tools.md): text before and after the calls section is content (vLLM's
non-streamed path drops what follows). A call cut by the end of output or whose JSON breaks keeps the
arguments parsed so far, closed to valid JSON. A call with an empty name is dropped. A calls section in
which no call began is content, markers included (as vLLM: "must not truncate the content").
"""

from __future__ import annotations

from typing import Any

from detok.parsing.limits import MAX_FUNCTION_NAME_CHARS
from detok.parsing.tools.core import StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream


CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
MAX_NAME = MAX_FUNCTION_NAME_CHARS

_CONTENT, _SECTION, _TYPE, _NAME, _PREARGS, _ARGS, _TAIL = range(7)


class SectionToolParser(StreamingToolParser):
    """A calls section of calls `CALL_BEGIN name SEP arguments CALL_END` (DeepSeek, Kimi K2)."""

    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    required_tokens = (CALLS_BEGIN, CALL_BEGIN, CALL_END, SEP)
    calls_begin: tuple[str, ...] = (CALLS_BEGIN,)
    calls_end: tuple[str, ...] = (CALLS_END,)
    call_begin, call_end, sep = CALL_BEGIN, CALL_END, SEP
    # V3 writes a type ("function") before the separator and the name after it
    _type_first = False

    def _call_name(self, raw: str) -> tuple[str, str | None]:
        """(function name, native call id or None) from the text before the separator."""
        return raw.strip(), None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _CONTENT
        self._name: list[str] = []
        self._value: JsonValueStream | None = None
        self._section: list[str] = []  # a section's text while it has had no call

    def _on_marker(self, marker: str) -> None:
        st = self._state
        if marker in self.calls_begin:
            self._end_call()
            self._end_section()
            self._section = [marker]
            self._state = _SECTION
        elif marker in self.calls_end:
            self._end_call()
            if self._section:
                self._section.append(marker)
            self._end_section()
            self._state = _CONTENT
        elif marker == self.call_begin:  # also without the section marker (lenient)
            self._end_call()
            self._section = []
            self._name = []
            self._state = _TYPE if self._type_first else _NAME
        elif marker == self.call_end:
            self._end_call()
            self._state = _SECTION
        elif marker == self.sep:
            if st == _TYPE:
                self._state = _NAME
            elif st == _NAME and not self._type_first:
                self._begin_args(_ARGS)
            elif st == _SECTION and self._section:
                self._section.append(marker)
        elif st == _CONTENT:
            self._content(marker)
        elif st == _SECTION and self._section:
            self._section.append(marker)

    def _on_text(self, text: str) -> None:
        while text:
            st = self._state
            if st == _CONTENT:
                self._content(text)
                return
            if st == _NAME:
                if not self._type_first:
                    self._name.append(text)
                    if sum(map(len, self._name)) > MAX_NAME:
                        self._state = _TAIL
                    return
                nl = text.find("\n")
                self._name.append(text if nl < 0 else text[:nl])
                if nl < 0:
                    if sum(map(len, self._name)) > MAX_NAME:
                        self._state = _TAIL
                    return
                self._begin_args(_PREARGS)
                text = text[nl + 1 :]
            elif st == _PREARGS:  # V3's "```json\n" fence before the JSON
                start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
                if start < 0:
                    return
                self._state = _ARGS
                text = text[start:]
            elif st == _ARGS:
                value = self._value
                assert value is not None
                out, rest = value.feed(text)
                self._args(out)
                if rest is not None:
                    self._args(value.close())
                    self._state = _TAIL
                return
            else:  # _SECTION, _TYPE, _TAIL: nothing of a call
                if st == _SECTION and self._section:
                    self._section.append(text)
                return

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        return self._value if self._state == _ARGS else None

    def _begin_args(self, state: int) -> None:
        name, native_id = self._call_name("".join(self._name))
        self._name = []
        if not name:
            self._state = _TAIL
            return
        self._open_call(name, native_id)
        self._value = JsonValueStream()
        self._state = state

    def _end_call(self) -> None:
        if self._value is not None:
            self._args(self._value.close())
            self._value = None
        self._close_call()
        self._name = []

    def _end_section(self) -> None:
        """A section that had no call is the model's text, markers included (as vLLM)."""
        if self._section:
            self._content("".join(self._section))
            self._section = []

    def _on_finish(self) -> None:
        self._end_call()
        self._end_section()
        self._state = _CONTENT


class DeepSeekV3ToolParser(SectionToolParser):
    names = ("deepseek_v3", "deepseekv3")
    _type_first = True


class DeepSeekV31ToolParser(SectionToolParser):
    names = ("deepseek_v31", "deepseekv31")
