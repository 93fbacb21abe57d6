"""The `xml_parameters` grammar's engine: Qwen3-Coder / Qwen3.5+ XML calls (`qwen3_coder`, also
`qwen3_xml`, `seed_oss`), between the table's `start` and `end` terminals.

    <tool_call>
    <function=NAME>
    <parameter=P>
    value
    </parameter>
    </function>
    </tool_call>

Values are typed by the request's tool schema (`schema_values`, vLLM's rules). The arguments are
the JSON object built while the text arrives, formatted as `json.dumps` would (`{"a": 1, "b": "x"}`):
`{` goes out with the name, a string value streams escaped as it arrives, a typed value goes out
when its `</parameter>` arrives. One newline after `>` and one before `</parameter>` are not part of
the value (as in vLLM). `<tool_call>`/`</tool_call>` are tokens in Qwen's vocabulary; the other tags
are text.

Edges (docs/reasoning-and-tools.md): a `<function=` without `<tool_call>` is a call too (vLLM's
fallback); after its `</function>` the text is content again, a further `<function=` a further call, and
a `</tool_call>` right after it (whitespace aside) closes it as in a region and is dropped. A missing
`</parameter>` is implied by a `<parameter=` or `</function>` at the start of a line (vLLM also checks
the next name against the schema, which needs text not yet seen). A `</parameter>` ends the value only
when the next text that is not whitespace is `<parameter=`, `</function>`, `</tool_call>` or the end of
output (vLLM's `_find_true_param_end`): until then it is held with the whitespace after it, and any
other text makes it the value's own (code or XML that mentions the tag). A name with `<>{}"'` or
whitespace is not a call (vLLM rejects it too); its text is dropped. A call cut by the end of output is
closed with what was parsed (vLLM streams the same, unclosed). A parameter written twice is written
twice (`json.loads` keeps the last, as vLLM's non-streamed dict; its streamed text repeats it too): a
key already sent is not taken back. A typed value's text longer than `MAX_HELD_CALL_CHARS` is not held
for typing: from there it is a string value, its text (valid JSON, as the bound's other families).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from detok.parsing.limits import MAX_FUNCTION_NAME_CHARS, MAX_HELD_CALL_CHARS
from detok.parsing.malformed import log_malformed
from detok.parsing.tools import schema_values as sv
from detok.parsing.tools.core import TEXT_SINK, StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream
from detok.parsing.tools.value_holds import hold_one_newline
from detok.parsing.types import VALUE_NEWLINE


START, END = "<tool_call>", "</tool_call>"
FUNC, FUNC_END = "<function=", "</function>"
PARAM, PARAM_END = "<parameter=", "</parameter>"
MAX_NAME = MAX_FUNCTION_NAME_CHARS  # a longer function (or parameter) name is not a name

# _PEND: a `</parameter>` came inside a value; the next tag or text tells whether it ended it
# _AFTER: a bare call's `</function>` came; only whitespace since (a `</tool_call>` may still close it)
_CONTENT, _CALL, _FNAME, _BODY, _PNAME, _VALUE, _FEND, _SKIP, _PEND, _AFTER = range(10)
_BAD_NAME = set("{}<>\"' \t\n\r")


class XmlParametersToolParser(StreamingToolParser):
    value_hold = VALUE_NEWLINE
    # the region's terminals (each family's table sets them: Seed-OSS's `<seed:tool_call>`)
    start: ClassVar[str] = START
    end: ClassVar[str] = END
    # the call and parameter tags (the invoke_parameters grammar sets MiniMax's and DSML's)
    function: ClassVar[str] = FUNC
    function_end: ClassVar[str] = FUNC_END
    parameter: ClassVar[str] = PARAM
    parameter_end: ClassVar[str] = PARAM_END
    # a function tag in content opens a call without the region's start tag (vLLM's qwen3_coder fallback)
    bare_calls: ClassVar[bool] = True
    terminal_names = ("function", "function_end", "parameter", "parameter_end")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _CONTENT
        self._name: list[str] = []
        self._props: dict = {}
        self._params = 0
        self._kind = ("", False)
        self._streaming = False
        self._value: list[str] = []  # typed value text, or nothing when streaming
        self._value_chars = 0  # the typed value text's length (held up to MAX_HELD_CALL_CHARS)
        self._vstarted = False  # the value's first character was seen (its leading newline dropped)
        self._held_nl = False  # a newline at the value's end so far (dropped if the value ends here)
        self._last_nl = False  # the value's raw text so far ends with a newline (a tag may start a line)
        # in _PEND: the `</parameter>` and the whitespace after it; in _AFTER: the whitespace
        self._pending = ""
        self._bare = False  # the call was opened by `<function=` in content, without `<tool_call>`

    # ---- events ------------------------------------------------------------------------------
    def _on_marker(self, marker: str) -> None:
        st = self._state
        if st == _PEND:
            if marker not in (self.parameter, self.function_end, self.end):  # the `</parameter>` was the value's text
                self._resume_value()
                self._on_marker(marker)
                return
            self._pending = ""
            self._end_value()
            st = self._state = _BODY
        elif st == _VALUE:
            if marker == self.parameter_end:  # held until the next tag or text shows whether it ends the value
                self._pending = marker
                self._state = _PEND
                return
            line_start = self._last_nl or not self._vstarted
            structural = (line_start and marker in (self.parameter, self.function_end)) or (
                marker == self.end and (self.end in self.token_markers or line_start))
            if not structural:
                self._value_text(marker)
                return
            self._end_value()
            st = self._state = _BODY
        elif st == _AFTER:
            space, self._pending = self._pending, ""
            st = self._state = _CONTENT
            if marker == self.end:  # it closes the bare call as it closes a region: dropped, with the space
                return
            self._content(space)  # (held as whitespace after a call: dropped if a call or the end follows)
        if st == _CONTENT:
            if marker == self.start:
                self._bare = False
                self._state = _CALL
            elif marker == self.function and self.bare_calls:  # a call without `<tool_call>`: after its
                # `</function>` comes content
                self._bare = True
                self._begin_name()
            else:
                self._content(marker)
        elif st in (_CALL, _FEND, _SKIP):
            if marker == self.function and st != _SKIP:
                self._begin_name()
            elif marker == self.end:
                self._state = _CONTENT
            elif marker == self.start:
                self._bare = False
                self._state = _CALL
            elif marker == self.function_end and st == _SKIP:
                self._state = self._function_ended()
        elif st in (_FNAME, _PNAME):  # a tag inside a name: not a call / not a parameter
            if st == _FNAME:  # (a bare one is a bad name: skipped to its `</function>`)
                self._state = _SKIP if self._bare else _CALL
            else:
                self._state = _BODY
            self._on_marker(marker)
        else:  # _BODY
            if marker == self.parameter:
                self._name = []
                self._state = _PNAME
            elif marker in (self.function_end, self.end, self.start, self.function):
                self._args("}")
                self._close_call()
                if marker == self.function_end:
                    self._state = self._function_ended()
                else:
                    self._state = _FEND
                    self._on_marker(marker)

    def _on_text(self, text: str) -> None:
        st = self._state
        if st == _CONTENT:
            self._content(text)
        elif st == _VALUE:
            self._value_text(text)
        elif st == _PEND:
            if text.isspace():  # (vLLM skips any whitespace, `str.lstrip()`)
                self._pending += text
            else:
                self._resume_value()
                self._value_text(text)
        elif st == _AFTER:
            if text.isspace():
                self._pending += text
            else:
                self._state = _CONTENT
                self._content(self._pending + text)
                self._pending = ""
        elif st == _FNAME or st == _PNAME:
            end = text.find(">")
            if end < 0:
                self._name.append(text)
                if sum(map(len, self._name)) > MAX_NAME:
                    self._state = _SKIP if st == _FNAME else _BODY
                return
            self._name.append(text[:end])
            name, string_attr = self._header("".join(self._name))
            rest = text[end + 1 :]
            if st == _FNAME:
                if not name or len(name) > MAX_NAME or _BAD_NAME.intersection(name):
                    self._state = _SKIP
                    return
                self._open_call(name)
                self._args("{")
                spec = self.tools.get(name)
                self._props = sv.properties(spec.parameters if spec is not None else None)
                self._params = 0
                self._state = _BODY
            else:
                if len(name) > MAX_NAME:
                    self._state = _BODY
                    return
                self._begin_value(name, string_attr)
            if rest:
                self._on_text(rest)
        # _CALL, _BODY, _FEND, _SKIP: text between tags is not part of anything

    def _on_finish(self) -> None:
        if self._state == _PNAME:
            self._state = _BODY
        if self._state == _PEND:  # the end of output: the `</parameter>` ended the value
            self._pending = ""
            self._state = _VALUE
        if self._state == _VALUE:
            self._end_value()
            self._state = _BODY
        if self._state == _BODY:
            self._args("}")
            self._close_call()
        self._state = _CONTENT
        self._pending = ""  # (in _AFTER: whitespace after the last call, dropped)

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        return TEXT_SINK if self._state == _VALUE and self._streaming else None

    def _text_value_steady(self) -> bool:
        # (printable text never ends with a newline; `_last_nl` is what `_fast_text` would clear)
        return self._vstarted and not self._held_nl and not self._last_nl

    def _resume_held_value(self, text: str) -> None:
        if text != "\n":
            raise ValueError(f"a qwen3_coder value holds no {text!r}")
        self._held_nl = self._last_nl = True

    def _fast_text(self, text: str) -> str | None:
        # inside a streamed string value, not at its start, no newline held or at the end: the text
        # is the value's as it stands (what `_value_text` would pass on)
        if not text or not self._vstarted or self._held_nl or text[-1] == "\n":
            return None
        self._last_nl = False
        return sv.json_string_body(text)

    # ---- names and values --------------------------------------------------------------------
    def _function_ended(self) -> int:
        # in a region text is dropped until `</tool_call>`; after a bare call it is content
        return _AFTER if self._bare else _FEND

    def _begin_name(self) -> None:
        self._name = []
        self._state = _FNAME

    def _header(self, text: str) -> tuple[str, str | None]:
        """A tag's text up to its `>`: the name, and its `string` attribute (None: none)."""
        return text, None

    def _begin_value(self, name: str, string_attr: str | None = None) -> None:
        sep = ", " if self._params else ""
        self._params += 1
        self._kind = sv.param_type(self._props, name)
        if string_attr == "false" and self._kind[0] == "":  # DSML, a parameter the schema does not
            self._kind = ("object", False)  # type: its `string="false"` value is JSON (else the text)
        self._streaming = sv.streams_as_string(*self._kind)
        self._args(f"{sep}{json.dumps(name, ensure_ascii=False)}: " + ('"' if self._streaming else ""))
        self._value = []
        self._value_chars = 0
        self._vstarted = False
        self._held_nl = False
        self._last_nl = False
        self._state = _VALUE

    def _value_text(self, text: str) -> None:
        if not text:
            return
        self._last_nl = text[-1] == "\n"
        if not self._vstarted:
            self._vstarted = True
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return
        text, held = hold_one_newline(text, "\n" if self._held_nl else "")
        self._held_nl = bool(held)
        if not text:
            return
        if self._streaming:
            self._args(sv.json_string_body(text))
            return
        self._value.append(text)
        self._value_chars += len(text)
        if self._value_chars > MAX_HELD_CALL_CHARS:  # too long to hold for typing: a string from here on
            log_malformed(f"a typed value past {MAX_HELD_CALL_CHARS} characters", "the value is its text as a string")
            held, self._value = "".join(self._value), []
            self._streaming = True
            self._args('"' + sv.json_string_body(held))

    def _resume_value(self) -> None:
        """The held `</parameter>` and whitespace are the value's text: back inside the value."""
        pending, self._pending = self._pending, ""
        self._state = _VALUE
        self._value_text(pending)

    def _end_value(self) -> None:
        self._held_nl = False
        if self._streaming:
            self._args('"')
        else:
            self._args(sv.value_json("".join(self._value), *self._kind))
            self._value = []
