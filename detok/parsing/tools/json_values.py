"""Decoding a JSON value the model wrote, and writing one back, without letting the model's text
raise or produce text that cannot be sent.

Two hazards of `json.loads`/`json.dumps` on model output (vLLM's parsers catch every exception and
give the output as content; ours run per token and their failure would end the request, or worse):
- nesting: the C decoder and encoder recurse, and how deep they go depends on the interpreter (3.11
  raises `RecursionError`, not a `ValueError`, near a thousand `[`; 3.13 goes further), so a value
  nested past detok's own `MAX_ARGUMENT_DEPTH` is refused here, the same on every interpreter; an
  integer of more than 4300 digits raises `ValueError` (CPython's limit);
- lone surrogates: a `\\ud800` escape decodes to a `str` that has no UTF-8, and `ensure_ascii=False`
  writes it back raw; such text fails the worker's msgpack encoding of the whole batch (every request
  of the step), so it is written back as its escape, which decodes to the same value.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from detok.parsing.limits import MAX_ARGUMENT_DEPTH

_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON `text` with every lone surrogate written as its `\\uXXXX` escape (in JSON text a raw
    surrogate can only be inside a string, where the escape means the same)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def nesting(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> int:
    """Levels of arrays and objects (lists, tuples, dicts) in `value`: `1` is 0, `[]` 1, `[[1]]` 2.
    Level by level, not recursive; stops counting past `limit` + 1."""
    depth = 0
    level = [value]
    while depth <= limit:
        containers = [v for v in level if isinstance(v, (list, tuple, dict))]
        if not containers:
            break
        depth += 1
        level = [item for c in containers for item in (c.values() if isinstance(c, dict) else c)]
    return depth


def _bounded(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict)) and nesting(value) > MAX_ARGUMENT_DEPTH:
        raise ValueError(f"nested deeper than {MAX_ARGUMENT_DEPTH} levels")
    return value


def loads(text: str) -> Any:
    """`json.loads`, raising only ValueError (also for nesting past `MAX_ARGUMENT_DEPTH`)."""
    try:
        return _bounded(json.loads(text))
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_ARGUMENT_DEPTH} levels") from None


def literal(text: str) -> Any:
    """`ast.literal_eval` (the peers' second reading of a value), raising only ValueError (also for
    nesting past `MAX_ARGUMENT_DEPTH`)."""
    try:
        return _bounded(ast.literal_eval(text))
    except (SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a Python literal: {type(e).__name__}") from None


def dumps(value: Any) -> str:
    """`json.dumps` as the arguments are formatted (`ensure_ascii=False`, no NaN), lone surrogates
    escaped; raises only ValueError (also for a value that is not JSON or nests too deep)."""
    try:
        return escape_surrogates(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, RecursionError) as e:
        raise ValueError(f"not JSON: {e}") from None
