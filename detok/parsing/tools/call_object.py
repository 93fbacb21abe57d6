"""The JSON call object of the JSON formats: `{"name": "f", "arguments": {...}}` (hermes, llama3_json,
mistral's array form), read as it arrives.

The name is reported as soon as its string is complete; the arguments value is passed on as the
model's raw text while it arrives (buffered only while the name is still unknown, i.e. when the model
wrote "arguments" before "name"). `"parameters"` is accepted for `"arguments"` (Llama 3 writes either).
A string-valued arguments (Granite and some Qwen fine-tunes serialize the object) is held until the
string closes: when its content is a JSON object, that content is the arguments (vLLM's hermes rule,
decoded once), otherwise the string literal itself. Other keys are validated and ignored. What is
held (the name, arguments before the name, a string-valued arguments) is bounded by
`MAX_HELD_CALL_CHARS`: past it the object fails as text that is not JSON does.
"""

from __future__ import annotations

import json

from detok.parsing.limits import MAX_HELD_CALL_CHARS
from detok.parsing.malformed import ENDS_THERE, log_malformed
from detok.parsing.tools import json_values
from detok.parsing.tools.json_stream import JsonValueStream

ARG_KEYS = ("arguments", "parameters")

_START, _KEY_OR_CLOSE, _KEY, _COLON, _VALUE, _COMMA_OR_CLOSE, _SUB, _DONE = range(8)
# what a sub-stream is reading
_READ_KEY, _READ_NAME, _READ_ARGS, _READ_OTHER = range(4)


def string_arguments(literal: str) -> str:
    """The arguments text for a string-valued arguments (its complete JSON literal). The decoded
    text may hold lone surrogates (from `\\ud800` escapes) and nest deeper than `json.loads` goes:
    see `json_values`."""
    try:
        inner = json.loads(literal)
        if isinstance(inner, str) and isinstance(json_values.loads(inner), dict):
            return json_values.escape_surrogates(inner)
    except ValueError:
        pass
    return literal


class CallObjectStream:
    """Feed the text from the object's `{` on; see the module docstring."""

    __slots__ = ("_state", "_sub", "_reading", "_collected", "_key", "_pending_args",
                 "_args_kind", "name", "args_seen", "failed", "done", "_fast", "_held")

    def __init__(self) -> None:
        self._state = _START
        self._sub: JsonValueStream | None = None
        self._reading = _READ_OTHER
        self._collected: list[str] = []
        self._key: str | None = None
        self._pending_args: list[str] = []  # arguments text before the name is known
        self._args_kind = ""  # first character of the arguments value ('"' for a string)
        self.name: str | None = None
        self.args_seen = False
        self.failed = False
        self.done = False
        self._fast = False  # reading the arguments of a named call: passed straight through
        self._held = 0  # characters in _collected and _pending_args

    def feed(self, text: str) -> tuple[str | None, str, str | None]:
        """Return (the name when it became known now, arguments text, the text after the object or
        None while it is open). On a failure (`failed`) the rest is the text from the offending
        character on; later feeds are ignored."""
        new_name: str | None = None
        args: list[str] = []
        if self.done or self.failed:
            return None, "", (text if self.done else None)
        if self._fast:  # the common case: more of the arguments, streamed as they come
            sub = self._sub
            assert sub is not None
            emitted, rest = sub.feed(text)
            if rest is None and not sub.failed:
                return None, emitted, None
            if emitted:
                args.append(emitted)
            if sub.failed:
                self.failed = True
                return None, "".join(args), rest
            assert rest is not None
            self._end_sub(args)
            text = rest
        i, n = 0, len(text)
        while i < n:
            st = self._state
            if st == _SUB:
                sub = self._sub
                assert sub is not None
                emitted, rest = sub.feed(text[i:] if i else text)
                if emitted and self._route(emitted, args):
                    log_malformed(f"more than {MAX_HELD_CALL_CHARS} characters held for one call", ENDS_THERE)
                    self.failed = True
                    return new_name, "".join(args), rest
                self._fast = self._reading == _READ_ARGS and self.name is not None and self._args_kind != '"'
                if self._fast and rest is None and not sub.failed:
                    break
                if sub.failed:
                    self.failed = True
                    return new_name, "".join(args), rest
                if rest is None:
                    break
                text, i, n = rest, 0, len(rest)  # the rest may hold text the sub held back
                got = self._end_sub(args)
                if got is not None:
                    new_name = got
                if self.failed:
                    return new_name, "".join(args), text[i:]
                continue
            c = text[i]
            if c in " \t\n\r":
                i += 1
                continue
            if st == _START:
                if c != "{":
                    self.failed = True
                    return new_name, "".join(args), text[i:]
                self._state = _KEY_OR_CLOSE
                i += 1
            elif st == _KEY_OR_CLOSE or st == _KEY:
                if c == '"':
                    self._begin_sub(_READ_KEY)
                elif c == "}" and st == _KEY_OR_CLOSE:
                    self.done = True
                    return new_name, "".join(args), text[i + 1 :]
                else:
                    self.failed = True
                    return new_name, "".join(args), text[i:]
            elif st == _COLON:
                if c != ":":
                    self.failed = True
                    return new_name, "".join(args), text[i:]
                self._state = _VALUE
                i += 1
            elif st == _VALUE:
                key = self._key
                if key == "name" and self.name is None:
                    self._begin_sub(_READ_NAME)
                elif key in ARG_KEYS and not self.args_seen:
                    self.args_seen = True
                    self._args_kind = c
                    self._begin_sub(_READ_ARGS)
                else:
                    self._begin_sub(_READ_OTHER)
            else:  # _COMMA_OR_CLOSE
                if c == ",":
                    self._state = _KEY
                    i += 1
                elif c == "}":
                    self.done = True
                    return new_name, "".join(args), text[i + 1 :]
                else:
                    self.failed = True
                    return new_name, "".join(args), text[i:]
        return new_name, "".join(args), None

    def _begin_sub(self, reading: int) -> None:
        self._sub = JsonValueStream()
        self._reading = reading
        self._collected = []
        self._state = _SUB

    def _route(self, emitted: str, args: list[str]) -> bool:
        """Pass `emitted` on or hold it; True when the held text passed MAX_HELD_CALL_CHARS."""
        if self._reading == _READ_ARGS and self._args_kind != '"':
            if self.name is not None:
                args.append(emitted)
                return False
            self._pending_args.append(emitted)
        elif self._reading != _READ_OTHER:
            self._collected.append(emitted)
        else:
            return False
        self._held += len(emitted)
        return self._held > MAX_HELD_CALL_CHARS

    def _end_sub(self, args: list[str]) -> str | None:
        """A key or value ended; returns the name when it was the name."""
        self._fast = False
        reading = self._reading
        self._sub = None
        self._state = _COMMA_OR_CLOSE
        if reading == _READ_KEY:
            self._key = json.loads("".join(self._collected))
            self._state = _COLON
        elif reading == _READ_NAME:
            raw = "".join(self._collected)
            # only a string is a name: anything else fails without being decoded (a nested array
            # or a huge number would make `json.loads` raise); a name holding a lone surrogate
            # cannot be sent (not UTF-8), so it is not a call either
            name = json.loads(raw) if raw.startswith('"') else None
            if not isinstance(name, str) or not name or json_values.has_surrogate(name):
                self.failed = True
                return None
            self.name = name
            if self._pending_args:
                args.extend(self._pending_args)
                self._pending_args = []
            return name
        elif reading == _READ_ARGS and self._args_kind == '"':
            text = string_arguments("".join(self._collected))
            (args if self.name is not None else self._pending_args).append(text)
        return None

    def close(self) -> str:
        """The end of the object's text came early (end of output, closing marker, or a failure):
        the text that ends the arguments passed on so far as valid JSON ("" if nothing to add).
        Arguments held for a name that never came are dropped with the call."""
        sub = self._sub
        out = ""
        if sub is not None and self._reading == _READ_ARGS:
            tail = sub.close()
            if self._args_kind == '"':
                if sub.started:
                    out = string_arguments("".join(self._collected) + tail)
            else:
                out = tail
        self._sub = None
        self._fast = False
        self.done = True
        return out if self.name is not None else ""

    @property
    def args_sink(self) -> JsonValueStream | None:
        """The arguments' stream while its text passes straight through (a named call)."""
        return self._sub if self._fast else None

    @property
    def pending_args(self) -> str:
        return "".join(self._pending_args)
