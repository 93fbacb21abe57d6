"""The `section_calls` grammar's engines: token-delimited calls in a calls section, the table's `start`
and `end`, each call `call_begin` HEAD `sep` ARGUMENTS `call_end` (DeepSeek V3 / V3.1, Kimi K2). The
table's `call_head` says what HEAD is: the name (`deepseek_v31`), a type then the name on its own line
with the arguments in a fence (`deepseek_v3`), or the model's native call id (`kimi_k2`,
`NativeIdSectionToolParser`). All the terminals are single tokens of the models' vocabularies.

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

import re
from typing import Any, ClassVar

from detok.parsing.limits import MAX_FUNCTION_NAME_CHARS
from detok.parsing.tools import json_values, schema_values as sv
from detok.parsing.tools.core import StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream


CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
MAX_NAME = MAX_FUNCTION_NAME_CHARS

_CONTENT, _SECTION, _TYPE, _NAME, _PREARGS, _ARGS, _TAIL = range(7)


class SectionToolParser(StreamingToolParser):
    """A calls section of calls `call_begin name sep arguments call_end` (DeepSeek V3.1; V3 with
    `_type_first`)."""

    # the terminals (a family's table sets them); `start_alias` / `end_alias`: another spelling of the
    # section's tags (Kimi K2's singular `<|tool_call_section_begin|>`), none if empty
    start: ClassVar[str] = CALLS_BEGIN
    end: ClassVar[str] = CALLS_END
    start_alias: ClassVar[str] = ""
    end_alias: ClassVar[str] = ""
    call_begin: ClassVar[str] = CALL_BEGIN
    call_end: ClassVar[str] = CALL_END
    sep: ClassVar[str] = SEP
    terminal_names = ("start_alias", "end_alias", "call_begin", "call_end", "sep")
    calls_begin: ClassVar[tuple[str, ...]] = (CALLS_BEGIN,)
    calls_end: ClassVar[tuple[str, ...]] = (CALLS_END,)
    # V3 writes a type ("function") before the separator and the name after it
    _type_first: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the section's tags with their other spellings, matched together
        cls.calls_begin = tuple(m for m in (cls.start, cls.start_alias) if m)
        cls.calls_end = tuple(m for m in (cls.end, cls.end_alias) if m)

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
        elif st == _CONTENT and marker != self.call_begin:
            # outside a section only its start (or a call's, leniently) opens one: the other
            # markers are the content as written (as vLLM and SGLang, which parse no section there)
            self._content(marker)
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


class NativeIdSectionToolParser(SectionToolParser):
    """A section whose call heads are the model's native call ids (Kimi K2):

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Beijing"}<|tool_call_end|><|tool_calls_section_end|>

    The text before the separator is the model's call id (`functions.NAME:IDX`); it is kept as the
    call's id (Kimi's template sends it back), and the name is the part between the last `.` and the
    `:` (vLLM: `id.split(":")[0].split(".")[-1]`). A bare counter id (`0`) names the request's only
    tool; with several tools the call is named after its arguments end, by the one tool whose
    parameters hold them all (else dropped), as vLLM. An id without `:IDX` is not a call (vLLM skips
    it). Arguments stream as raw JSON text."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._deferred: list[str] | None = None  # arguments of a bare-counter call, name not yet known
        self._deferred_id = ""

    def _call_name(self, raw: str) -> tuple[str, str | None]:
        native = raw.strip()
        if native.isdigit():  # a bare counter: the name comes from the request's tools
            if len(self.tools) == 1:
                return next(iter(self.tools)), native
            self._deferred, self._deferred_id = [], native
            return "", None
        if not _ID.fullmatch(native):  # no ":IDX" (vLLM skips these calls)
            return "", None
        return native.split(":")[0].split(".")[-1].strip(), native

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        return None if self._deferred is not None else super()._current_sink()

    def _begin_args(self, state: int) -> None:
        super()._begin_args(state)
        if self._deferred is not None:  # read the arguments before naming the call
            self._value = JsonValueStream()
            self._state = state

    def _args(self, text: str) -> None:
        if self._deferred is not None:
            self._deferred.append(text)
        else:
            super()._args(text)

    def _end_call(self) -> None:
        if self._deferred is None:
            super()._end_call()
            return
        if self._value is not None:
            self._deferred.append(self._value.close())
            self._value = None
        args, native, self._deferred = "".join(self._deferred), self._deferred_id, None
        name = self._infer(args)
        if name is not None:
            self._open_call(name, native)
            super()._args(args)
            self._close_call()

    def _infer(self, args: str) -> str | None:
        """The one tool whose parameters hold every argument (vLLM's bare-counter rule); None when
        none or several do, or the arguments are not a JSON object."""
        try:
            value = json_values.loads(args)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        keys = set(value)
        found = [t.name for t in self.tools.values() if keys <= set(sv.properties(t.parameters))]
        return found[0] if len(found) == 1 else None


_ID = re.compile(r".+:\d+", re.DOTALL)
