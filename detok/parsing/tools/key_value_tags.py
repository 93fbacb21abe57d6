"""The `key_value_tags` grammar's engine: GLM-4.5 / 4.6 / 4.7's calls (`glm45`), every tag a token.

A grammar kind of its own because the function name is bare text up to a newline (no tag around it)
and each argument is a key tag pair followed by a value tag pair, typed by the schema or read as JSON
then a Python literal; the table names the six tags.

    <tool_call>NAME
    <arg_key>city</arg_key>
    <arg_value>Beijing</arg_value>
    </tool_call>

The name is the first line after `<tool_call>` (ended also by `<arg_key>` or `</tool_call>`, for calls
without arguments), stripped. Keys are stripped. A value whose parameter the request's schema types
`"string"` stays a string, all the text between its tags (its leading and trailing whitespace too:
vLLM strips only other values since #42026, SGLang none since #20543; GLM's template writes the
value inline, so that whitespace is the model's, e.g. code's indentation), and streams escaped as it
arrives; any other value is stripped and read as JSON, then as a Python literal, else kept as a
string (vLLM's `_deserialize`), and goes out when its `</arg_value>` arrives. The arguments are
formatted as `json.dumps` would (`{"a": 1, "b": "x"}`).

Edges (docs/reasoning-and-tools.md): text around calls is content. A call cut by the end of output is
closed with what was parsed (a value cut short is taken as it stands). A key without a value is left
out. A key written twice is written twice (`json.loads` keeps the last, as the peers' non-streamed dict;
their streamed text repeats it too): a key already sent is not taken back.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from detok.parsing.limits import MAX_FUNCTION_NAME_CHARS
from detok.parsing.tools import json_values, schema_values as sv
from detok.parsing.tools.core import TEXT_SINK, StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream
from detok.parsing.types import VALUE_VERBATIM


START, END = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
MAX_NAME = MAX_FUNCTION_NAME_CHARS

_CONTENT, _NAME, _BODY, _KEY, _VALUE, _SKIP = range(6)


def deserialize(text: str) -> Any:
    try:
        return json_values.loads(text)
    except ValueError:
        pass
    try:
        return json_values.literal(text)
    except ValueError:
        return text


def value_json(text: str) -> str:
    try:
        return json_values.dumps(deserialize(text))
    except ValueError:
        return json.dumps(text, ensure_ascii=False)


class KeyValueTagsToolParser(StreamingToolParser):
    value_hold = VALUE_VERBATIM
    # the terminals (a family's table sets them)
    start: ClassVar[str] = START
    end: ClassVar[str] = END
    key: ClassVar[str] = KEY
    key_end: ClassVar[str] = KEY_END
    value: ClassVar[str] = VALUE
    value_end: ClassVar[str] = VALUE_END
    terminal_names = ("key", "key_end", "value", "value_end")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _CONTENT
        self._text: list[str] = []  # the name, key, or typed value read so far
        self._key: str | None = None
        self._props: dict = {}
        self._params = 0
        self._string = False

    def _on_marker(self, marker: str) -> None:
        st = self._state
        if st == _VALUE:
            if marker not in (self.value_end, self.end):
                self._value_text(marker)
                return
            self._end_value()
            st = self._state = _BODY
            if marker == self.value_end:
                return
        if marker == self.start:
            if st != _CONTENT:
                self._end_call()
            self._text = []
            self._state = _NAME
        elif st == _CONTENT:
            self._content(marker)
        elif marker == self.end:
            if st == _NAME:
                self._begin_call()
            self._end_call()
            self._state = _CONTENT
        elif st == _NAME:
            if marker == self.key and self._begin_call():
                self._text = []
                self._state = _KEY
        elif marker == self.key and st == _BODY:
            self._text = []
            self._state = _KEY
        elif marker == self.key_end and st == _KEY:
            self._key = "".join(self._text).strip()
            self._state = _BODY
        elif marker == self.value and st == _BODY and self._key is not None:
            self._begin_value(self._key)
            self._key = None

    def _on_text(self, text: str) -> None:
        st = self._state
        if st == _CONTENT:
            self._content(text)
        elif st == _VALUE:
            self._value_text(text)
        elif st == _NAME:
            nl = text.find("\n")
            self._text.append(text if nl < 0 else text[:nl])
            if nl >= 0:
                self._begin_call()
            elif sum(map(len, self._text)) > MAX_NAME:
                self._state = _SKIP
        elif st == _KEY:
            self._text.append(text)

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        return TEXT_SINK if self._state == _VALUE and self._string else None

    def _text_value_steady(self) -> bool:
        return True  # a string value holds nothing back: any text goes out (escaped) as it comes

    def _fast_text(self, text: str) -> str | None:
        return sv.json_string_body(text) if text else None

    def _begin_call(self) -> bool:
        name = "".join(self._text).strip()
        self._text = []
        if not name or len(name) > MAX_NAME:
            self._state = _SKIP
            return False
        self._open_call(name)
        self._args("{")
        spec = self.tools.get(name)
        self._props = sv.properties(spec.parameters if spec is not None else None)
        self._params = 0
        self._key = None
        self._state = _BODY
        return True

    def _begin_value(self, key: str) -> None:
        spec = self._props.get(key)
        self._string = isinstance(spec, dict) and spec.get("type") == "string"
        sep = ", " if self._params else ""
        self._params += 1
        self._args(f"{sep}{json.dumps(key, ensure_ascii=False)}: " + ('"' if self._string else ""))
        self._text = []
        self._state = _VALUE

    def _value_text(self, text: str) -> None:
        if self._string:
            self._args(sv.json_string_body(text))
        else:
            self._text.append(text)

    def _end_value(self) -> None:
        if self._string:
            self._args('"')
        else:
            self._args(value_json("".join(self._text).strip()))
        self._text = []

    def _end_call(self) -> None:
        if self._state == _VALUE:
            self._end_value()
        if self._state in (_BODY, _KEY, _VALUE):
            self._args("}")
            self._close_call()
        self._state = _CONTENT

    def _on_finish(self) -> None:
        if self._state == _NAME:
            self._begin_call()
        if self._state != _CONTENT:
            self._end_call()
