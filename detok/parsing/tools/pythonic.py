"""The pythonic grammar (vLLM's `pythonic` and `llama4_pythonic` tables): the output is a Python list
of calls with keyword arguments, `[get_weather(city="Paris", days=[1, 2]), get_time()]`, maybe
between `<|python_start|>` and `<|python_end|>` (Llama 4).

As vLLM's parsers: an output that starts (whitespace aside) with `[` or the start tag is held and read
whole with Python's own parser; a list of calls whose arguments are literals becomes the calls (each
value written as JSON), anything else is given back as the model's text. An output starting with
other text is content, passed on at once. The list is decided at the end of the output or at the end
tag, never in between, so the result cannot depend on how the text was cut; the calls then arrive
in one step (vLLM streams them as the list grows). Held text is bounded by `MAX_HELD_CALL_CHARS`.
"""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from detok.parsing.limits import MAX_HELD_CALL_CHARS
from detok.parsing.malformed import log_malformed
from detok.parsing.tools import json_values
from detok.parsing.tools.core import StreamingToolParser
from detok.parsing.types import KIND_CONTENT, Steady

_CONTENT, _LEAD, _HELD = range(3)  # _LEAD: only whitespace so far, at the output's start


def read_calls(text: str) -> list[tuple[str, str]] | None:
    """(name, JSON arguments) per call of a Python list of calls, or None if `text` is not one."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, ast.List):
        return None
    calls = []
    for node in tree.body.elts:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args):
            return None
        args: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None
            try:
                args[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
        try:
            calls.append((node.func.id, json_values.dumps(args)))
        except ValueError:  # a literal JSON has no form for (a set, bytes, a complex number)
            return None
    return calls


class PythonicToolParser(StreamingToolParser):
    start: ClassVar[str] = ""  # the tags around the list (a table sets them: Llama 4's)
    end: ClassVar[str] = ""
    hot_chars = "["
    # vLLM's pythonic parsers have no adjust_request: the request's skip_special_tokens stands
    keeps_special_tokens = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _LEAD
        self._held: list[str] = []
        self._held_chars = 0
        # steady only in content (`_CONTENT`), where `[` opens nothing (a list opens only the
        # output): its triggers are the text tags' first characters, so the compiled path keeps `[`
        self._steady_content = Steady(KIND_CONTENT, self._splitter.firsts)
        # in a held list, text free of the tags' first characters is only held (and the bound
        # checked on it): one piece or many, the list is read from the same text at its end
        self._steady_held = Steady(KIND_CONTENT, self._splitter.firsts, held=True)

    def steady(self) -> Steady | None:
        if self._state == _HELD and not self._splitter._held:
            return self._steady_held
        return super().steady()

    def _on_marker(self, marker: str) -> None:
        if marker == self.start and self._state == _LEAD:
            self._state = _HELD
            self._hold(self._marker_text)
        elif marker == self.end and self._state == _HELD:
            self._hold(self._marker_text)
            self._decide()
        else:
            self._on_text(self._marker_text)

    def _on_text(self, text: str) -> None:
        if self._state == _CONTENT:
            self._content(text)
        elif self._state == _HELD:
            self._hold(text)
        else:
            body = text.lstrip()
            if not body:
                self._held.append(text)
            elif body[0] == "[":
                self._state = _HELD
                self._hold(text)
            else:
                self._give_back(text)

    def _hold(self, text: str) -> None:
        self._held.append(text)
        self._held_chars += len(text)
        if self._held_chars > MAX_HELD_CALL_CHARS:
            log_malformed(f"a call list held past {MAX_HELD_CALL_CHARS} characters", "its text is content")
            self._give_back("")

    def _give_back(self, text: str) -> None:
        held, self._held = "".join(self._held), []
        self._state = _CONTENT
        self._content(held + text)

    def _decide(self) -> None:
        raw = "".join(self._held)
        body = raw
        for tag in (self.start, self.end):
            if tag:
                body = body.replace(tag, "")
        calls = read_calls(body)
        if calls is None:
            if body.strip():
                log_malformed("not a Python list of calls with literal arguments", "its text is content")
            self._give_back("")
            return
        self._held = []
        self._state = _CONTENT
        for name, arguments in calls:
            self._open_call(name)
            self._args(arguments)
            self._close_call()

    def _on_finish(self) -> None:
        if self._state == _HELD:
            self._decide()
        elif self._state == _LEAD:
            self._give_back("")
