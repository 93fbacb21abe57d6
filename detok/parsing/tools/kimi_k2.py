"""`kimi_k2` (SGLang: `kimi_k2`): Kimi K2's token-delimited calls with native call ids.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Beijing"}<|tool_call_end|><|tool_calls_section_end|>

The text before `<|tool_call_argument_begin|>` is the model's call id (`functions.NAME:IDX`); it is
kept as the call's id (Kimi's template sends it back), and the name is the part between the last `.`
and the `:` (vLLM: `id.split(":")[0].split(".")[-1]`). A bare counter id (`0`) names the request's only tool; with several tools the call is named after its
arguments end, by the one tool whose parameters hold them all (else dropped), as vLLM. An id
without `:IDX` is not a call (vLLM skips it). The singular section markers
(`<|tool_call_section_begin|>`) are accepted as vLLM does. Arguments stream as raw JSON text.

Edges (docs/reasoning-and-tools.md): as deepseek's (`SectionToolParser`): text around the section is
content, a section without calls is content, a cut call keeps its arguments closed to valid JSON.
"""

from __future__ import annotations

import re
from typing import Any

from detok.parsing.tools import json_values, schema_values as sv
from detok.parsing.tools.core import TextSink
from detok.parsing.tools.deepseek import SectionToolParser
from detok.parsing.tools.json_stream import JsonValueStream


SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN, ARG_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


class KimiK2ToolParser(SectionToolParser):
    names = ("kimi_k2",)
    markers = (*SECTION_BEGIN, *SECTION_END, CALL_BEGIN, ARG_BEGIN, CALL_END)
    required_tokens = (SECTION_BEGIN[0], SECTION_END[0], CALL_BEGIN, ARG_BEGIN, CALL_END)
    calls_begin, calls_end = SECTION_BEGIN, SECTION_END
    call_begin, call_end, sep = CALL_BEGIN, CALL_END, ARG_BEGIN

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
