"""The `json_region` grammar's engine: a call is one JSON object `{"name": ..., "arguments": {...}}`
between the table's `start` and `end` terminals (`hermes`: `<tool_call>`...`</tool_call>`, also
`qwen3_json`, `granite4`).

The terminals are single tokens in Qwen's vocabulary (detected by id); elsewhere they are found in
the text. The name is emitted as soon
as its JSON string closes; the arguments object is streamed as the model's raw text while it arrives
(a string-valued arguments holding a serialized object is decoded once, as vLLM does).

Behaviour at the edges (docs/reasoning-and-tools.md):
- Text before, between and after calls is content (whitespace between calls dropped). vLLM keeps
  only the text before the first call.
- A region whose JSON breaks before the name is known (or that has no name) is given back as content
  verbatim, markers included, as vLLM's non-streamed path does for unparsable output; so is one that
  holds more than `MAX_HELD_CALL_CHARS` with no name yet (at once, then its text until the end marker).
- JSON that breaks after the name, or a call cut by the end of output: the call is kept with the
  arguments passed on so far, closed to valid JSON (vLLM passes such arguments on as written: not
  JSON, as in vLLM #41739 for kimi_k2).
"""

from __future__ import annotations

from typing import Any, ClassVar

from detok.parsing.limits import MAX_HELD_CALL_CHARS
from detok.parsing.malformed import log_malformed
from detok.parsing.tools.call_object import CallObjectStream
from detok.parsing.tools.core import StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream


START = "<tool_call>"
END = "</tool_call>"

_CONTENT, _CALL, _TAIL, _GIVEN_UP = range(4)  # _GIVEN_UP: a nameless region past the bound, content


class JsonRegionToolParser(StreamingToolParser):
    # the region's terminals (each family's table sets them)
    start: ClassVar[str] = START
    end: ClassVar[str] = END

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _CONTENT
        self._obj: CallObjectStream | None = None
        self._raw: list[str] = []  # the region's text while no name is known (content if it fails)
        self._raw_chars = 0

    def _on_marker(self, marker: str) -> None:
        if self._state == _GIVEN_UP:  # the given-up region ends as an unparsable one: verbatim
            self._state = _CONTENT
            if marker != self.start:
                self._content(marker)
                return
        if marker == self.start:
            if self._state != _CONTENT:
                self._end_region(None)
            self._state = _CALL
            self._obj = CallObjectStream()
            self._raw = [marker]
            self._raw_chars = 0
        elif self._state == _CONTENT:  # a stray end marker: the model's text
            self._content(marker)
        else:
            self._end_region(marker)

    def _on_text(self, text: str) -> None:
        state = self._state
        if state == _CONTENT:
            self._content(text)
        elif state == _CALL:
            obj = self._obj
            assert obj is not None
            if obj.name is None:
                self._raw.append(text)
                self._raw_chars += len(text)
                if self._raw_chars > MAX_HELD_CALL_CHARS:
                    log_malformed(f"no name in the first {MAX_HELD_CALL_CHARS} characters of a call",
                                  "its text is content")
                    self._content("".join(self._raw))
                    self._raw, self._obj, self._state = [], None, _GIVEN_UP
                    return
            name, args, rest = obj.feed(text)
            if name is not None:
                self._open_call(name)
                self._raw = []
            if args:
                self._args(args)
            if rest is not None or obj.failed:
                if obj.name is not None:
                    self._args(obj.close())
                    self._state = _TAIL
        elif state == _TAIL and self._raw:
            self._raw.append(text)
        elif state == _GIVEN_UP:
            self._content(text)

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        obj = self._obj
        return obj.args_sink if self._state == _CALL and obj is not None else None

    def _end_region(self, end_marker: str | None) -> None:
        obj = self._obj
        if obj is not None and obj.name is not None:
            self._args(obj.close())
            self._close_call()
        elif self._raw:  # never became a call: the model's text
            self._content("".join(self._raw) + (end_marker or ""))
        self._raw = []
        self._obj = None
        self._state = _CONTENT

    def _on_finish(self) -> None:
        if self._state != _CONTENT and self._state != _GIVEN_UP:
            self._end_region(None)
