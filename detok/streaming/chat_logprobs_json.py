"""A chat choice's `logprobs` object written straight to JSON bytes, per streamed chunk.

`logprobs_format.chat_logprobs` builds one `TokenLogprob` Struct and `top_logprobs` + 1 `TopLogprob`
Structs per token and msgspec encodes them: with top-5, the largest share of a logprobs chunk's cost.
Here each token string's JSON is made once (`{"token":"...","logprob":` and `,"bytes":[...]`, kept per
token id: tokens repeat) and a chunk's floats are encoded by msgspec in one call per column, so per
token `_chatlogprobs.c` only copies a few byte strings. Without a compiler the Structs are encoded as
before.

The bytes are exactly what msgspec writes for `ChatLogprobs(chat_content(entries, k))` (msgspec's
own float format included: it is not `repr`'s); `tests/frontend/test_chat_logprobs_json.py` checks
it on hypothesis-made entries. The result is a `msgspec.Raw`, which the chunk renderer and the
response Structs encode as is.
"""

from __future__ import annotations

import msgspec

from detok.streaming.logprobs_format import chat_logprobs
from detok.receiver.token_logprobs import RawToken, TokenLogprobs

try:  # the compiled writer (setup.py builds it; without a compiler, the Structs encoded)
    from detok._native._chatlogprobs import render as _render
except ImportError:  # pragma: no cover - the tests run the fallback too
    _render = None

_encode = msgspec.json.encode
_HEAD = b'{"content":['
_TAIL = b"]}"
# token ids whose strings' JSON is kept: a whole vocabulary of today's models (≤ 256K ids), about
# 250 bytes each; cleared when full, so any ids a worker sends hold at most this many
FRAGMENTS_MAX = 1 << 18

# token id -> (its token string, the string's type, `{"token":T,"logprob":`, `,"bytes":[..]`). Keyed
# by id (an int hashes for free; a str that came off the wire is new and would be hashed each time)
# and checked against the string that came with the id, so a worker's string is what is written.
_fragments: dict[int, tuple[str, type, bytes, bytes]] = {}


def _fragment(tid: int, token: str) -> tuple[bytes, bytes]:
    """The JSON around a token's logprob (its `token` and `bytes` fields), kept for `tid`."""
    if type(token) is RawToken:
        head, tail = b'{"token":' + _encode(str(token)) + b',"logprob":', b',"bytes":' + _encode(list(token.data))
    else:
        head, tail = b'{"token":' + _encode(token) + b',"logprob":', b',"bytes":' + _encode(list(token.encode()))
    if len(_fragments) >= FRAGMENTS_MAX:
        _fragments.clear()
    _fragments[tid] = (token, type(token), head, tail)
    return head, tail


def chat_object(entries: TokenLogprobs, top_logprobs: int) -> bytes:
    """The chat `logprobs` object of `entries` for a request with `top_logprobs` (0-20), encoded."""
    if entries.items is not None:  # rendered by the worker, with the request's top_logprobs
        return _HEAD + b",".join(entries.items) + _TAIL
    if _render is None:
        return _structs_encoded(entries, top_logprobs)
    top = entries.top_logprobs
    # the floats in msgspec's format, one call per column; the compiled writer clamps where needed
    return _render(entries.token_ids, entries.tokens, entries.logprobs, _encode(entries.logprobs), entries.top_counts,
                   entries.top_ids, entries.top_tokens, top, _encode(top) if top_logprobs > 0 else b"[]",
                   top_logprobs, _fragments, _fragment)


def _structs_encoded(entries: TokenLogprobs, top_logprobs: int) -> bytes:
    """Without the compiled writer: the Structs that define the shape, encoded (the columns
    checked as the writer checks them)."""
    n, m = len(entries.token_ids), len(entries.top_ids)
    if not (len(entries.tokens) == len(entries.logprobs) == len(entries.top_counts) == n
            and len(entries.top_tokens) == len(entries.top_logprobs) == m and sum(entries.top_counts) <= m):
        raise ValueError("logprob entries: columns of different lengths")
    return _encode(chat_logprobs(entries, top_logprobs))


def chat_logprobs_json(entries: TokenLogprobs, top_logprobs: int) -> msgspec.Raw:
    """A streamed chunk's chat `logprobs` object, encoded."""
    return msgspec.Raw(chat_object(entries, top_logprobs))


def joined_chat_logprobs(parts: list[msgspec.Raw]) -> msgspec.Raw:
    """A non-streamed choice's `logprobs`: the `content` items of its chunks' objects, in order."""
    cut = len(_HEAD), -len(_TAIL)
    items = [bytes(memoryview(p)[cut[0] : cut[1]]) for p in parts]
    return msgspec.Raw(_HEAD + b",".join(i for i in items if i) + _TAIL)
