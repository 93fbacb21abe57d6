"""The `keyed_call` grammar's engine (a table's terminals: Gemma 4's), calls as

    START call:NAME{key:<|"|>text<|"|>,n:1} END

States: content; in a region before its name (`call_prefix`, or a bare `:` as some checkpoints
write, then the name up to `{`); the arguments (up to END). Terminals: `start`, `end` and the
string delimiter (`<|"|>`), by id where they are tokens. The arguments are decoded by
`keyed_values` once the call ends (END, the next START, or the end of the output), so the result
cannot depend on how the text was cut; the name goes out at its `{`, the arguments in one piece
(vLLM streams them re-decoded as they grow). Text outside regions is content; whitespace between
calls is dropped.

Edges: a region with no `{` before its end, or whose name is empty, too long or holds whitespace or
`<>{}"'`, is the model's text (content, markers included), as vLLM's regex leaves an unmatched
region. Arguments nested past `MAX_ARGUMENT_DEPTH` or held past `MAX_HELD_CALL_CHARS` end the call
with the arguments `{}` and a log line (its name already went out). A call cut by the end of output
is decoded from what was written (vLLM's streaming result).
"""

from __future__ import annotations

from typing import Any, ClassVar

from detok.parsing.limits import MAX_FUNCTION_NAME_CHARS, MAX_HELD_CALL_CHARS
from detok.parsing.malformed import log_malformed
from detok.parsing.tools import json_values
from detok.parsing.tools.core import StreamingToolParser
from detok.parsing.tools.keyed_values import decode
from detok.parsing.types import KIND_ARGUMENTS, Steady

_CONTENT, _HEAD, _ARGS, _SKIP = range(4)  # _SKIP: a call given up past a bound, to its END
_BAD_NAME = set("{}<>\"' \t\n\r")


class KeyedCallToolParser(StreamingToolParser):
    names = ("keyed_call",)
    start: ClassVar[str] = "<|tool_call>"
    end: ClassVar[str] = "<tool_call|>"
    delimiter: ClassVar[str] = '<|"|>'  # what quotes a string value
    call_prefix: ClassVar[str] = "call:"
    terminal_names = ("delimiter",)
    markers: tuple[str, ...] = (start, end, delimiter)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _CONTENT
        self._raw: list[str] = []  # the region's text while no name is known (content if it fails)
        self._args_text: list[str] = []
        self._held = 0
        # inside the arguments, text free of a text marker's first character is only held (and
        # the bound checked on it): one piece or many, the call decodes the same text at its end
        self._steady_held = Steady(KIND_ARGUMENTS, self._splitter.firsts, held=True)

    def steady(self) -> Steady | None:
        if self._state == _ARGS and not self._splitter._held:
            return self._steady_held
        return super().steady()

    def _on_marker(self, marker: str) -> None:
        st = self._state
        if marker == self.start:
            self._end_region("")
            self._state = _HEAD
            self._raw = [marker]
            self._held = 0
        elif marker == self.end:
            if st == _CONTENT:
                self._content(marker)  # a stray end: the model's text
            else:
                self._end_region(marker)
        elif st == _CONTENT:
            self._content(marker)
        else:  # the delimiter, as its own string (its text may be "" where special tokens were skipped)
            self._on_text(marker)

    def _on_text(self, text: str) -> None:
        st = self._state
        if st == _CONTENT:
            self._content(text)
        elif st == _HEAD:
            self._raw.append(text)
            head = "".join(self._raw)[len(self._raw[0]):]
            brace = head.find("{")
            if brace < 0:
                if len(head) > MAX_FUNCTION_NAME_CHARS + len(self.call_prefix) + 8:
                    self._give_back("")  # no name within the bound: the model's text
                return
            name = self._name(head[:brace])
            if name is None:
                self._give_back("")
                return
            self._raw = []
            self._open_call(name)
            self._state = _ARGS
            self._args_text = []
            self._held = 0
            self._on_text(head[brace + 1 :])
        elif st == _ARGS:
            self._args_text.append(text)
            self._held += len(text)
            if self._held > MAX_HELD_CALL_CHARS:
                log_malformed(f"arguments held past {MAX_HELD_CALL_CHARS} characters", "the call's arguments are {}")
                self._args_text = []
                self._args("{}")
                self._close_call()
                self._state = _SKIP

    def _name(self, head: str) -> str | None:
        """The function name of a region's text before its `{` (None: not a call)."""
        head = head.strip()
        if head.startswith(self.call_prefix):
            head = head[len(self.call_prefix) :]
        elif head.startswith(":"):
            head = head[1:]
        else:
            return None
        if not head or len(head) > MAX_FUNCTION_NAME_CHARS or _BAD_NAME.intersection(head):
            return None
        return head

    def _give_back(self, end_marker: str) -> None:
        """The region never became a call: its text is content."""
        self._content("".join(self._raw) + end_marker)
        self._raw = []
        self._state = _CONTENT

    def _end_region(self, end_marker: str) -> None:
        st = self._state
        if st == _HEAD:
            self._give_back(end_marker)
        elif st == _ARGS:
            body, self._args_text = "".join(self._args_text), []
            try:
                arguments = json_values.dumps(decode(body, self.delimiter))
            except ValueError as e:
                log_malformed(str(e), "the call's arguments are {}")
                arguments = "{}"
            self._args(arguments)
            self._close_call()
        self._state = _CONTENT

    def _on_finish(self) -> None:
        self._end_region("")

