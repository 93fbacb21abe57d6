"""The `json_objects` grammar's engine (`llama3_json`): bare JSON calls, `{"name": "f", "parameters":
{...}}` (or `"arguments"`), optionally after the table's `start` (Llama 3's `<|python_tag|>`), several
separated by `;` and/or whitespace. A grammar kind of its own because no terminal opens a call: any
`{` of the content may, so the engine holds text from each `{` until the object shows it is a call.

There is no opener marker, so every `{` in the content may start a call: the text from it is held
while it could still be one. It is a call once the object has a string "name" and an "arguments" or
"parameters" key (the name goes out then, the arguments stream as the model's raw text). It is
content again when the JSON breaks before that (the `{` goes out as content and the text after it
is read again, as vLLM's non-streamed search tries every `{`), or when the object closes without
those keys (as vLLM #22130's fix: an object without a name in the prose is not a call, and the
calls around it stay calls).

Edges (docs/reasoning-and-tools.md): text around the calls is content (vLLM's non-streamed path drops
it; its streamed path only parses output that starts with `{` or `<|python_tag|>`). `;` and whitespace
between calls are dropped. A `<|python_tag|>` (with the separators after it) is dropped when a call
follows it; otherwise it is content as the decoder gave it: its own text with
`skip_special_tokens=False`, none when skipped (vLLM: with no call parsed, both its paths give the
output as decoded; it does not set `skip_special_tokens` for this family, so by default the tag is
skipped). JSON that breaks inside a call's arguments ends the call there (arguments closed to valid
JSON); the text from the break on is content again.
"""

from __future__ import annotations

from typing import Any, ClassVar

from detok.parsing.tools.call_object import CallObjectStream
from detok.parsing.tools.core import StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream


class JsonObjectsToolParser(StreamingToolParser):
    # the optional tag before the calls (the table's `start`; any marker of this grammar is that tag)
    start: ClassVar[str] = "<|python_tag|>"
    end: ClassVar[str] = ""
    separators = " \t\n\r;"
    hot_chars = "{"
    # vLLM's Llama3JsonToolParser has no adjust_request: the request's skip_special_tokens stands
    keeps_special_tokens = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._obj: CallObjectStream | None = None
        self._raw: list[str] = []  # the held text from `{` while undecided
        self._pending: list[str] = []  # arguments text before the call is certain
        self._decided = False
        # `<|python_tag|>`s not yet known to introduce a call: their text and the separators after
        # them (`_tagged`: while none of it is decided; then it belongs to the object that follows)
        self._intro: list[str] = []
        self._tagged = False

    def _on_marker(self, marker: str) -> None:
        if self._obj is not None:  # inside an object the tag is its text (none if skipped)
            self._on_text(self._marker_text)
            return
        # held (state 2: the next text may not pass as content) until what follows shows a call
        self._intro.append(self._marker_text)
        self._tagged = True
        self._state = 2

    def _release_intro(self) -> None:
        """The held tags were not a call's: content, as decoded."""
        intro, self._intro, self._tagged = self._intro, [], False
        self._content("".join(intro))
        if self._obj is None:
            self._state = 0

    def _on_text(self, text: str) -> None:
        while text:
            if self._obj is None:
                if self._tagged:
                    body = text.lstrip(self.separators)
                    if len(body) < len(text):
                        self._intro.append(text[: len(text) - len(body)])
                    text = body
                    if not text:
                        return
                    if text[0] != "{":
                        self._release_intro()
                    self._tagged = False  # (a `{` now: the intro goes with the object)
                brace = text.find("{")
                if brace < 0:
                    self._content(text)
                    return
                self._content(text[:brace])
                self._obj = CallObjectStream()
                self._state = 1
                self._raw, self._pending, self._decided = [], [], False
                text = text[brace:]
            text = self._in_object(text)

    def _in_object(self, text: str) -> str:
        """Feed the open object; returns the text to read again as content-level text."""
        obj = self._obj
        assert obj is not None
        if not self._decided:
            self._raw.append(text)
        name, args, rest = obj.feed(text)
        if args:
            (self._args if self._decided else self._pending.append)(args)
        if not self._decided and obj.name is not None and obj.args_seen:
            self._decided = True
            self._intro = []  # the tags introduced this call
            self._open_call(obj.name)
            self._args("".join(self._pending))
            self._pending, self._raw = [], []
        if obj.failed:
            if self._decided:
                self._args(obj.close())
                self._close_call()
                self._obj = None
                self._state = 0
                return rest or ""
            raw = "".join(self._raw)
            self._obj = None
            self._state = 0
            self._release_intro()
            self._content("{")
            return raw[1:]
        if rest is None:
            return ""
        if self._decided:
            self._args(obj.close())
            self._close_call()
        else:  # a complete object that is not a call
            self._release_intro()
            consumed = "".join(self._raw)
            self._content(consumed[: len(consumed) - len(rest)])
        self._obj = None
        self._state = 0
        return rest

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        obj = self._obj
        return obj.args_sink if obj is not None and self._decided else None

    def _on_finish(self) -> None:
        obj = self._obj
        if obj is None:
            self._release_intro()  # tags at the end, nothing after them
            return
        self._obj = None
        self._state = 0
        if self._decided:
            self._args(obj.close())
            self._close_call()
        else:  # an object cut short before it was a call: the model's text
            self._release_intro()
            self._content("".join(self._raw))
