"""A chat choice's `logprobs` object written straight to JSON bytes, per streamed chunk.

`logprobs_format.chat_logprobs` builds one `TokenLogprob` Struct and `top_logprobs` + 1
`TopLogprob` Structs per token and msgspec encodes them: ≈15 µs of the frontend's CPU per token
with top-5, the largest share of a logprobs chunk's cost. Here each token string's JSON is made
once (`{"token":"...","logprob":` and `,"bytes":[...]`, kept per token id: tokens repeat) and a
chunk's floats are encoded by msgspec in one call per column, so per token only a few byte strings
are copied (by `_chatlogprobs.c`, or joined in Python without a compiler).

The bytes are exactly what msgspec writes for `ChatLogprobs(chat_content(entries, k))` (msgspec's
own float format included: it is not `repr`'s); `tests/frontend/test_chat_logprobs_json.py` checks
it on hypothesis-made entries. The result is a `msgspec.Raw`, which the chunk renderer and the
response Structs encode as is.
"""

from __future__ import annotations

import msgspec

from detok.frontend.logprobs_format import FLOOR, clamped
from detok.receiver.token_logprobs import RawToken, TokenLogprobs

try:  # the compiled writer (setup.py builds it; without a compiler, the Python one below)
    from detok.frontend._chatlogprobs import render as _render
except ImportError:  # pragma: no cover - the tests run the Python writer too
    _render = None

_encode = msgspec.json.encode
_INF = float("inf")
_HEAD = b'{"content":['
_TAIL = b"]}"
_NO_TOP = b',"top_logprobs":[]}'
_TOP = b',"top_logprobs":['
_END_TOP = b"}]}"
_NEXT_TOP = b"},"
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


def _float_array(values: list[float]) -> bytes:
    """The values as msgspec's JSON array, -inf and NaN as OpenAI's -9999.0 (+inf: 0.0)."""
    data = _encode(values)
    # msgspec writes inf and NaN as null (the only "n" a float list can hold)
    if b"n" in data or (values and min(values) < FLOOR):
        data = _encode([x if FLOOR <= x < _INF else clamped(x) for x in values])
    return data


def _floats(values: list[float]) -> list[bytes]:
    """Each value as msgspec writes it (clamped as above)."""
    return _float_array(values)[1:-1].split(b",") if values else []


def chat_object(entries: TokenLogprobs, top_logprobs: int) -> bytes:
    """The chat `logprobs` object of `entries` for a request with `top_logprobs` (0-20), encoded."""
    if _render is None:
        return _HEAD + _py_chat_items(entries, top_logprobs) + _TAIL
    top = entries.top_logprobs
    # the floats in msgspec's format, one call per column; the compiled writer clamps where needed
    return _render(entries.token_ids, entries.tokens, entries.logprobs, _encode(entries.logprobs), entries.top_counts,
                   entries.top_ids, entries.top_tokens, top, _encode(top) if top_logprobs > 0 else b"[]",
                   top_logprobs, _fragments, _fragment)


def _py_chat_items(entries: TokenLogprobs, top_logprobs: int) -> bytes:
    """The `content` items of the object, comma separated, in Python (no compiler at install; the
    tests hold it to the same bytes)."""
    n, m = len(entries.token_ids), len(entries.top_ids)
    if not (len(entries.tokens) == len(entries.logprobs) == len(entries.top_counts) == n
            and len(entries.top_tokens) == len(entries.top_logprobs) == m and sum(entries.top_counts) <= m):
        raise ValueError("logprob entries: columns of different lengths")
    lps = _floats(entries.logprobs)
    get = _fragments.get
    out: list[bytes] = []
    add = out.append
    if top_logprobs <= 0:
        for sid, token, lp in zip(entries.token_ids, entries.tokens, lps):
            c = get(sid)
            if c is not None and c[0] == token and c[1] is type(token):
                out += (c[2], lp, c[3], _NO_TOP, b",")
            else:
                head, tail = _fragment(sid, token)
                out += (head, lp, tail, _NO_TOP, b",")
    else:
        ids, tokens, tlps = entries.top_ids, entries.top_tokens, _floats(entries.top_logprobs)
        j = 0
        for sid, token, lp, count in zip(entries.token_ids, entries.tokens, lps, entries.top_counts):
            c = get(sid)
            if c is not None and c[0] == token and c[1] is type(token):
                head, tail = c[2], c[3]
            else:
                head, tail = _fragment(sid, token)
            # the sampled token first, then the alternatives without it (vLLM's order)
            out += (head, lp, tail, _TOP, head, lp, tail)
            n = 1
            for i in range(j, j + count):
                if n >= top_logprobs:
                    break
                tid = ids[i]
                if tid == sid:
                    continue
                t = tokens[i]
                c = get(tid)
                if c is not None and c[0] == t and c[1] is type(t):
                    out += (_NEXT_TOP, c[2], tlps[i], c[3])
                else:
                    h, tl = _fragment(tid, t)
                    out += (_NEXT_TOP, h, tlps[i], tl)
                n += 1
            add(_END_TOP)
            add(b",")
            j += count
    if out:
        out.pop()  # the last comma
    return b"".join(out)


def chat_logprobs_json(entries: TokenLogprobs, top_logprobs: int) -> msgspec.Raw:
    """A streamed chunk's chat `logprobs` object, encoded."""
    return msgspec.Raw(chat_object(entries, top_logprobs))


def joined_chat_logprobs(parts: list[msgspec.Raw]) -> msgspec.Raw:
    """A non-streamed choice's `logprobs`: the `content` items of its chunks' objects, in order."""
    cut = len(_HEAD), -len(_TAIL)
    items = [bytes(memoryview(p)[cut[0] : cut[1]]) for p in parts]
    return msgspec.Raw(_HEAD + b",".join(i for i in items if i) + _TAIL)
