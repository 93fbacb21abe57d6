"""The argument format of the `keyed_call` grammar (Gemma 4): an object body of `key:value` pairs
with strings between a delimiter terminal instead of JSON quotes, decoded to the call's JSON arguments.

    location:<|"|>Paris, France<|"|>,days:3,metric:true,tags:[<|"|>a<|"|>,<|"|>b<|"|>],opts:{<|"|>3<|"|>:null}

- a key is the text up to its `:` (whitespace around it dropped), or a delimited string;
- a value is a delimited string (its text exactly, no escapes: the delimiter cannot occur in it), an
  object `{...}`, an array `[...]`, or a bare scalar up to the next `,` `}` `]`: `true`, `false`,
  `null`, a number (vLLM's Gemma 4 tests: `count:42` is 42, `score:3.14` 3.14, `108.` 108.0), and
  any other bare text its string;
- the text may be cut (a call the end of output cut): an unterminated string is its text so far, an
  unclosed object or array holds what was read, a key without a value is the empty string (vLLM's
  non-streamed `_parse_gemma4_args` reads cut text the same way).

Nesting past `MAX_ARGUMENT_DEPTH` is not decoded (`ValueError`): the caller gives the call back as
the model's text.
"""

from __future__ import annotations

import math
import re
from typing import Any

from detok.parsing.limits import MAX_ARGUMENT_DEPTH

_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_SPACE = " \t\r\n"
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


def scalar(text: str) -> Any:
    """A bare value: a JSON literal, a number, else the text itself."""
    if text in _LITERALS:
        return _LITERALS[text]
    if _INT.fullmatch(text) and len(text) <= 4000:  # (CPython's int() refuses past 4300 digits)
        return int(text)
    if _FLOAT.fullmatch(text) and len(text) <= 4000:
        value = float(text)
        if math.isfinite(value):
            return value
    return text


class _Reader:
    __slots__ = ("text", "delim", "i", "n")

    def __init__(self, text: str, delim: str) -> None:
        self.text, self.delim, self.i, self.n = text, delim, 0, len(text)

    def skip(self, chars: str) -> None:
        while self.i < self.n and self.text[self.i] in chars:
            self.i += 1

    def string(self) -> str:
        """At a delimiter: the string up to the next one (or the end of the text)."""
        start = self.i + len(self.delim)
        end = self.text.find(self.delim, start)
        if end < 0:
            self.i = self.n
            return self.text[start:]
        self.i = end + len(self.delim)
        return self.text[start:end]

    def value(self, depth: int, closers: str) -> Any:
        text, i = self.text, self.i
        if text.startswith(self.delim, i):
            return self.string()
        c = text[i]
        if c == "{" or c == "[":
            if depth >= MAX_ARGUMENT_DEPTH:
                raise ValueError(f"arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels")
            self.i += 1
            return self.object(depth + 1) if c == "{" else self.array(depth + 1)
        start = i
        while i < self.n and text[i] not in closers and not text.startswith(self.delim, i):
            i += 1
        self.i = i
        return scalar(text[start:i].strip(_SPACE))

    def object(self, depth: int) -> dict[str, Any]:
        """After `{` (or at the start of the arguments): pairs up to `}` or the end of the text."""
        out: dict[str, Any] = {}
        text = self.text
        while True:
            self.skip(_SPACE + ",")
            if self.i >= self.n:
                return out
            if text[self.i] == "}":
                self.i += 1
                return out
            if text.startswith(self.delim, self.i):
                key = self.string()
                self.skip(_SPACE)
                if self.i < self.n and text[self.i] == ":":
                    self.i += 1
            else:
                colon = self.i
                while colon < self.n and text[colon] not in ":,}":
                    colon += 1
                key = text[self.i : colon].strip(_SPACE)
                self.i = colon
                if colon >= self.n or text[colon] != ":":  # a key without `:` (cut, or not a pair)
                    if key:
                        out[key] = ""
                    continue
                self.i += 1
            self.skip(_SPACE)
            if self.i >= self.n or text[self.i] in ",}":
                out[key] = ""
                continue
            out[key] = self.value(depth, ",}")

    def array(self, depth: int) -> list[Any]:
        """After `[`: items up to `]` or the end of the text."""
        out: list[Any] = []
        while True:
            self.skip(_SPACE + ",")
            if self.i >= self.n:
                return out
            if self.text[self.i] == "]":
                self.i += 1
                return out
            if self.text[self.i] == "}":  # a stray closer: not an item
                self.i += 1
                continue
            out.append(self.value(depth, ",]"))


def decode(body: str, delim: str) -> dict[str, Any]:
    """The arguments object of a call whose body (the text between its `{` and `}`, or from its `{`
    to where the text was cut) is `body`. ValueError: nested past MAX_ARGUMENT_DEPTH."""
    return _Reader(body, delim).object(1)
