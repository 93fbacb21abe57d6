"""Decoding a JSON value the model wrote, and writing one back, without letting the model's text
raise or produce text that cannot be sent.

Two hazards of `json.loads`/`json.dumps` on model output (vLLM's parsers catch every exception and
give the output as content; ours run per token and their failure would end the request, or worse):
- nesting: the C decoder and encoder recurse, so about a thousand `[` raise `RecursionError` (not a
  `ValueError`), and an integer of more than 4300 digits raises `ValueError` (CPython's limit);
- lone surrogates: a `\\ud800` escape decodes to a `str` that has no UTF-8, and `ensure_ascii=False`
  writes it back raw; such text fails the worker's msgpack encoding of the whole batch (every request
  of the step), so it is written back as its escape, which decodes to the same value.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON `text` with every lone surrogate written as its `\\uXXXX` escape (in JSON text a raw
    surrogate can only be inside a string, where the escape means the same)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def loads(text: str) -> Any:
    """`json.loads`, raising only ValueError (also for nesting past the decoder's depth)."""
    try:
        return json.loads(text)
    except RecursionError as e:
        raise ValueError(f"JSON nested too deep: {e}") from None


def dumps(value: Any) -> str:
    """`json.dumps` as the arguments are formatted (`ensure_ascii=False`, no NaN), lone surrogates
    escaped; raises only ValueError (also for a value that is not JSON or nests too deep)."""
    try:
        return escape_surrogates(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, RecursionError) as e:
        raise ValueError(f"not JSON: {e}") from None
