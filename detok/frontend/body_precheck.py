"""Refuse a request body whose arrays are too long before pydantic parses it.

pydantic builds every value of a body before it checks a list's length: 800K token ids take it
0.55 s, 250K chat messages 0.49 s, all of it holding the GIL (so every stream of the process
stalls). Here msgspec finds the `prompt` and `messages` values without building them (8 ms for a
6 MB body), and the count that proves them too long is taken in C (`bytes.count`) or element by
element (`json`'s C scanner, one element per call, stopping at the first one past the bound), so
only bodies whose lists can be legal reach pydantic.

A body this cannot read (not JSON, not an object) is left to pydantic, which words the error.
"""

from __future__ import annotations

import json

import msgspec

from detok.frontend.errors import RequestError
from detok.frontend.limits import MAX_MESSAGES

# Bodies up to this size go straight to pydantic (a few ms at most, whatever they hold).
PRECHECK_MIN_BYTES = 256 * 1024

_SCANNER = json.JSONDecoder()
_WHITESPACE = b" \t\r\n"


class _Arrays(msgspec.Struct):
    prompt: msgspec.Raw = msgspec.Raw(b"")
    messages: msgspec.Raw = msgspec.Raw(b"")


def precheck(body: bytes, kind: str, max_model_len: int) -> None:
    """RequestError (400) if the body's prompt ids or chat messages are more than can be served."""
    if len(body) < PRECHECK_MIN_BYTES:
        return
    try:
        arrays = msgspec.json.decode(body, type=_Arrays)
    except msgspec.DecodeError:
        return  # pydantic words the error
    if kind == "completion":
        ids = _flat_int_count(bytes(arrays.prompt))
        if ids is not None and ids >= max_model_len:
            raise RequestError(
                f"This model's maximum context length is {max_model_len} tokens. However, your "
                f"request has {ids} input tokens. Please reduce the length of the input.",
                "prompt",
                code="context_length_exceeded",
            )
    elif len(arrays.messages) and _more_elements_than(bytes(arrays.messages), MAX_MESSAGES):
        raise RequestError(f"messages: at most {MAX_MESSAGES} messages are allowed", "messages")


def _flat_int_count(raw: bytes) -> int | None:
    """Number of elements of `[1, 2, ...]` or `[[1, 2, ...]]` (one prompt of ids); None for any
    other value (text, several prompts: pydantic and the validation handle those)."""
    raw = raw.strip(_WHITESPACE)
    if not raw.startswith(b"[") or b'"' in raw or raw.count(b"[") > 2:
        return None
    if raw.count(b"[") == 2:
        inner = raw[1:-1].strip(_WHITESPACE)
        if not (inner.startswith(b"[") and inner.endswith(b"]")):
            return None
        raw = inner
    if not raw[1:-1].strip(_WHITESPACE):
        return 0
    return raw.count(b",") + 1


def _more_elements_than(raw: bytes, bound: int) -> bool:
    """Whether a JSON array holds more than `bound` elements, reading at most bound + 1 of them."""
    text = raw.decode("utf-8", "surrogatepass")
    if not text.startswith("["):
        return False
    pos, n, end = 1, 0, len(text)
    while pos < end:
        while pos < end and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= end or text[pos] == "]":
            return False
        try:
            _, pos = _SCANNER.raw_decode(text, pos)
        except ValueError:
            return False  # pydantic words the error
        n += 1
        if n > bound:
            return True
    return False
