"""The `marker_calls` grammar's engine (`mistral`): calls after the table's `start` (`[TOOL_CALLS]`),
in both of Mistral's forms, told apart by the text after the marker. A grammar kind of its own because
the one start terminal opens either of two syntaxes, chosen by the tokenizer version that wrote it:

- Tokenizers before v11: `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]`, a JSON array of call
  objects (each read by `CallObjectStream`, arguments streamed raw).
- v11 and later: `[TOOL_CALLS]f[ARGS]{...}` per call (`[CALL_ID]id` before `[ARGS]` is skipped;
  without `[ARGS]` the name ends at `{`, as vLLM reads HF-tokenized output).

Call ids are Mistral's shape (9 letters and digits: mistral-common rejects others when the call is
sent back), derived from the request's deterministic `call_id(index)`.

Edges (docs/reasoning-and-tools.md): content is the text before `[TOOL_CALLS]`; `[TOOL_CALLS]` followed
by words that never reach `{` is content, a single word (a name cut before its arguments) is dropped;
text after a call's JSON that is not whitespace is content (vLLM puts it into the arguments, which are
then not JSON). Arguments that break or are cut off are closed to valid JSON at that point (vLLM v11+
streams them as written).
"""

from __future__ import annotations

import hashlib
import string
from typing import Any, ClassVar

from detok.parsing.limits import MAX_FUNCTION_NAME_CHARS
from detok.parsing.tools.call_object import CallObjectStream
from detok.parsing.tools.core import StreamingToolParser, TextSink
from detok.parsing.tools.json_stream import JsonValueStream


TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
MAX_NAME = MAX_FUNCTION_NAME_CHARS
_ALNUM = string.ascii_letters + string.digits

_CONTENT, _START, _NAME, _CALL_ID, _ARGS, _ARRAY, _ITEM, _AFTER = range(8)


def mistral_id(call_id: str) -> str:
    """9 alphanumerics from a call id, deterministic."""
    digest = hashlib.blake2b(call_id.encode(), digest_size=16).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:9])


class MarkerCallsToolParser(StreamingToolParser):
    # the terminals (a family's table sets them): the calls' opener, and v11's argument and call-id tags
    start: ClassVar[str] = TOOL_CALLS
    end: ClassVar[str] = ""
    args_tag: ClassVar[str] = ARGS
    call_id_tag: ClassVar[str] = CALL_ID
    terminal_names = ("args_tag", "call_id_tag")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _CONTENT
        self._name: list[str] = []
        self._value: JsonValueStream | None = None
        self._obj: CallObjectStream | None = None
        self._array_sep = False  # in the array: a call ended, a comma or `]` comes next

    def _call_id_for(self, index: int) -> str:
        return mistral_id(self._call_id(index))

    def _on_marker(self, marker: str) -> None:
        st = self._state
        if marker == self.start:
            self._end_section()
            self._state = _START
            self._name = []
        elif st == _NAME and marker in (self.args_tag, self.call_id_tag):
            if not self._begin_call():
                return
            self._state = _ARGS if marker == self.args_tag else _CALL_ID
        elif st == _CALL_ID and marker == self.args_tag:
            self._state = _ARGS
        elif st == _CONTENT or st == _AFTER:
            self._content(marker)

    def _on_text(self, text: str) -> None:
        while text:
            st = self._state
            if st == _CONTENT or st == _AFTER:
                self._content(text)
                return
            if st == _START:
                stripped = text.lstrip()
                if not stripped:
                    return
                # `[` opens the array; a bare `{` is one call object without the brackets
                self._state = _ARRAY if stripped[0] in "[{" else _NAME
                self._array_sep = False
                text = stripped[1:] if stripped[0] == "[" else stripped
            elif st == _NAME:
                brace = text.find("{")
                self._name.append(text if brace < 0 else text[:brace])
                if brace < 0:
                    if sum(map(len, self._name)) > MAX_NAME:  # not a name: the model's text
                        self._content("".join(self._name))
                        self._state = _AFTER
                    return
                if "".join(self._name).rstrip().endswith("["):  # junk, then the array (vLLM's fallback)
                    self._name = []
                    self._state, self._array_sep = _ARRAY, False
                    text = text[brace:]
                    continue
                if not self._begin_call():
                    text = text[brace:]
                    continue
                self._state = _ARGS
                text = text[brace:]
            elif st == _CALL_ID:  # the model's own id: skipped (ids are ours, of Mistral's shape)
                return
            elif st == _ARGS:
                text = self._args_text(text)
            elif st == _ARRAY:
                text = self._array_text(text)
            else:  # _ITEM
                text = self._item_text(text)

    def _current_sink(self) -> JsonValueStream | TextSink | None:
        if self._state == _ARGS:
            return self._value
        if self._state == _ITEM and self._obj is not None:
            return self._obj.args_sink
        return None

    def _begin_call(self) -> bool:
        name = "".join(self._name).strip()
        self._name = []
        if not name:
            self._state = _AFTER
            return False
        self._open_call(name)
        self._value = JsonValueStream()
        return True

    def _args_text(self, text: str) -> str:
        value = self._value
        assert value is not None
        out, rest = value.feed(text)
        self._args(out)
        if rest is None:
            return ""
        self._args(value.close())
        self._close_call()
        self._value = None
        self._state = _AFTER
        return rest

    def _array_text(self, text: str) -> str:
        stripped = text.lstrip()
        if not stripped:
            return ""
        c = stripped[0]
        if c == "," and self._array_sep:
            self._array_sep = False
            return stripped[1:]
        if c == "]":
            self._state = _AFTER
            return stripped[1:]
        if c == "{" and not self._array_sep:
            self._obj = CallObjectStream()
            self._state = _ITEM
            return stripped
        self._state = _AFTER  # not the array of calls: the rest is the model's text
        return stripped

    def _item_text(self, text: str) -> str:
        obj = self._obj
        assert obj is not None
        name, args, rest = obj.feed(text)
        if name is not None:
            self._open_call(name)
        if args:
            self._args(args)
        if rest is None:
            return ""
        self._end_item()
        self._state = _AFTER if obj.failed else _ARRAY
        self._array_sep = True
        return rest

    def _end_item(self) -> None:
        obj = self._obj
        if obj is not None and obj.name is not None:
            self._args(obj.close())
            self._close_call()
        self._obj = None

    def _end_section(self) -> None:
        if self._state == _ARGS and self._value is not None:
            self._args(self._value.close())
            self._value = None
        elif self._state == _ITEM:
            self._end_item()
        self._close_call()

    def _on_finish(self) -> None:
        if self._state == _NAME:  # no arguments came: a bare name is a cut call (dropped, as
            held = "".join(self._name)  # vLLM v11+), other text is the model's (vLLM pre-v11)
            if len(held.split()) > 1:
                self._content(held.strip())
            self._name = []
        self._end_section()
        self._state = _CONTENT
