"""Refuse a request body whose arrays are too long before pydantic parses it.

pydantic builds every value of a body before it checks a list's length: hundreds of thousands of
token ids or chat messages take it a large fraction of a second, all of it holding the GIL (so every
stream of the process stalls). Here msgspec finds the `prompt` and `messages` values without
building them, and the count that proves them too long is taken in C (`bytes.count`) or element by
element (`json`'s C scanner, one element per call, stopping at the first one past the bound), so
only bodies whose lists can be legal reach pydantic.

A body this cannot read (not JSON, not an object) is left to pydantic, which words the error.

A prompt of ids too long for the context is not refused when the request asks for
`truncate_prompt_tokens` (vLLM cuts token prompts of any length): its JSON array is cut to the
`max_model_len` ids on the kept side before pydantic sees it (no truncation keeps more than that),
the dropped text checked to be integers only, and the request's own truncation then applies as usual.
"""

from __future__ import annotations

import json
import re

import msgspec
import numpy as np

from detok.api.errors import RequestError
from detok.api.limits import MAX_MESSAGES

# Bodies up to this size go straight to pydantic (a few ms at most, whatever they hold).
PRECHECK_MIN_BYTES = 256 * 1024

_SCANNER = json.JSONDecoder()
_WHITESPACE = b" \t\r\n"


_INTS = re.compile(rb"[\s\d,-]*")


class _Arrays(msgspec.Struct):
    prompt: msgspec.Raw = msgspec.Raw(b"")
    messages: msgspec.Raw = msgspec.Raw(b"")
    truncate_prompt_tokens: msgspec.Raw = msgspec.Raw(b"")
    truncation_side: msgspec.Raw = msgspec.Raw(b"")


def precheck(body: bytes, kind: str, max_model_len: int) -> bytes:
    """The body to parse (this one, or with a long prompt of ids cut as the module says);
    RequestError (400) if its prompt ids or chat messages are more than can be served."""
    if len(body) < PRECHECK_MIN_BYTES:
        return body
    try:
        arrays = msgspec.json.decode(body, type=_Arrays)
    except msgspec.DecodeError:
        return body  # pydantic words the error
    if kind == "completion":
        ids = _flat_int_count(bytes(arrays.prompt))
        truncated = bytes(arrays.truncate_prompt_tokens).strip(_WHITESPACE) not in (b"", b"null")
        if ids is not None and ids >= max_model_len and truncated:
            if ids == max_model_len:
                return body
            cut = _cut_ids(body, bytes(arrays.prompt), max_model_len, bytes(arrays.truncation_side))
            if cut is not None:
                return cut
        if ids is not None and ids >= max_model_len:
            raise RequestError(
                f"This model's maximum context length is {max_model_len} tokens. However, your "
                f"request has {ids} input tokens. Please reduce the length of the input.",
                "prompt",
                code="context_length_exceeded",
            )
    elif len(arrays.messages) and _more_elements_than(bytes(arrays.messages), MAX_MESSAGES):
        raise RequestError(f"messages: at most {MAX_MESSAGES} messages are allowed", "messages")
    return body


def _cut_ids(body: bytes, raw: bytes, keep: int, side: bytes) -> bytes | None:
    """The body with its prompt array (`raw`, flat or one nested) cut to `keep` elements on the
    side `truncation_side` keeps (the last unless it is "right"); None if the dropped text is not
    integers alone (pydantic then words the error)."""
    raw = raw.strip(_WHITESPACE)
    nested = raw[1:].lstrip(_WHITESPACE).startswith(b"[")
    inner = raw[1:-1].strip(_WHITESPACE)[1:-1] if nested else raw[1:-1]
    commas = np.flatnonzero(np.frombuffer(inner, dtype=np.uint8) == ord(","))
    right = side.strip(_WHITESPACE) == b'"right"'
    at = commas[keep - 1] if right else commas[len(commas) - keep]  # (len(commas) + 1 > keep elements)
    kept, dropped = (inner[:at], inner[at:]) if right else (inner[at + 1:], inner[:at + 1])
    if _INTS.fullmatch(dropped) is None:
        return None
    fields = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    fields["prompt"] = msgspec.Raw(b"[[" + kept + b"]]" if nested else b"[" + kept + b"]")
    return msgspec.json.encode(fields)


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
