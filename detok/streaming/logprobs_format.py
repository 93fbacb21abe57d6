"""OpenAI's logprobs shapes from the entries the workers sent (`RequestDelta.logprobs`): the
frontend only formats, the token strings were made in the workers.

Chat (`logprobs: true`, `top_logprobs` 0-20):
    {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
Completions (`logprobs` 0-20):
    {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}

The frontend writes the chat shape with `chat_logprobs_json` (the same bytes, no Struct per token);
the Structs here define it, and the tests hold the writer to their encoding.

Same for a streamed chunk and a non-streamed body: a body built from all of a request's entries
equals the concatenation of the chunks built from its deltas' entries (for completions, with one
`CompletionOffsets` carried from chunk to chunk). As vLLM's serving code: each token's
`top_logprobs` lists the sampled token first, then the alternatives without it, `top_logprobs`
of them in all for chat and `logprobs + 1` for completions (a dict keyed by token string);
logprobs below -9999.0 (-inf) are written as -9999.0, as OpenAI does.
"""

from __future__ import annotations

import codecs

import msgspec

from detok.receiver.token_logprobs import RawToken, TokenLogprobs

_FLOOR = -9999.0
_INF = float("inf")
_utf8_decode = codecs.utf_8_decode
_BYTES_CACHE_MAX = 1 << 16


class TopLogprob(msgspec.Struct, gc=False):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(msgspec.Struct, gc=False):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(msgspec.Struct, gc=False):
    """A chat choice's (or chunk choice's) `logprobs` object."""

    content: list[TokenLogprob]


class CompletionLogprobs(msgspec.Struct, gc=False):
    """A completion choice's (or chunk choice's) `logprobs` object."""

    text_offset: list[int]
    token_logprobs: list[float]
    tokens: list[str]
    top_logprobs: list[dict[str, float]]

    def extend(self, more: CompletionLogprobs) -> None:
        """Append the entries of the next chunk (the body of a non-streamed response)."""
        self.text_offset += more.text_offset
        self.token_logprobs += more.token_logprobs
        self.tokens += more.tokens
        self.top_logprobs += more.top_logprobs


class CompletionOffsets:
    """Where the next token's text begins, carried from chunk to chunk of one response:
    `text_offset` is the length of the previous tokens' strings (vLLM's rule), except that a token
    named by its bytes counts the characters its bytes complete (OpenAI's: the tokens of one
    character share its offset). `offset` may start at the prompt's length (echo)."""

    __slots__ = ("offset", "pending")

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.pending = b""  # bytes of an unfinished character

    def advance(self, token: str) -> int:
        """The offset of `token`; moves past it."""
        here = self.offset
        if type(token) is RawToken or self.pending:
            data = self.pending + (token.data if type(token) is RawToken else token.encode())
            text, used = _utf8_decode(data, "replace", False)
            self.offset += len(text)
            self.pending = data[used:]
        else:
            self.offset += len(token)
        return here


_bytes_cache: dict[str, list[int]] = {}


def _bytes(token: str) -> list[int]:
    """The `bytes` list of a token string (shared lists, never mutated: tokens repeat)."""
    if type(token) is RawToken:  # not cached: equal to the str of its spelling, other bytes
        return list(token.data)
    got = _bytes_cache.get(token)
    if got is None:
        if len(_bytes_cache) >= _BYTES_CACHE_MAX:  # bounded whatever the strings a worker sends
            _bytes_cache.clear()
        got = _bytes_cache[token] = list(token.encode())
    return got


def _clamped(x: float) -> float:
    return 0.0 if x == _INF else _FLOOR  # -inf and NaN: OpenAI's "very unlikely"


def _text(token: str) -> str:
    return str(token) if type(token) is RawToken else token


def chat_content(entries: TokenLogprobs, top_logprobs: int) -> list[TokenLogprob]:
    """The `content` items of `entries` for a chat request with `top_logprobs` (0-20)."""
    # Per token on the frontend's busiest path: helpers inlined for plain strings (the common
    # case), the rare ones (RawToken, -inf, a token not yet cached) through the functions above.
    out = []
    ids, tokens, lps = entries.top_ids, entries.top_tokens, entries.top_logprobs
    cache_get = _bytes_cache.get
    j = 0
    for sid, token, lp, count in zip(entries.token_ids, entries.tokens, entries.logprobs, entries.top_counts):
        if not _FLOOR <= lp < _INF:
            lp = _clamped(lp)
        if type(token) is str:
            b = cache_get(token) or _bytes(token)
        else:
            b, token = _bytes(token), _text(token)
        alts: list[TopLogprob] = []
        if top_logprobs > 0:
            alts.append(TopLogprob(token, lp, b))
            for i in range(j, j + count):
                if len(alts) >= top_logprobs:
                    break
                if ids[i] == sid:
                    continue
                t, x = tokens[i], lps[i]
                if not _FLOOR <= x < _INF:
                    x = _clamped(x)
                if type(t) is str:
                    alts.append(TopLogprob(t, x, cache_get(t) or _bytes(t)))
                else:
                    alts.append(TopLogprob(_text(t), x, _bytes(t)))
        j += count
        out.append(TokenLogprob(token, lp, b, alts))
    return out


def chat_logprobs(entries: TokenLogprobs, top_logprobs: int) -> ChatLogprobs:
    """A streamed chunk's `logprobs` (a body's: `ChatLogprobs(content)` with every chunk's
    `chat_content` concatenated, or `chat_content` of all entries at once)."""
    return ChatLogprobs(chat_content(entries, top_logprobs))


def completion_logprobs(entries: TokenLogprobs, logprobs: int, offsets: CompletionOffsets) -> CompletionLogprobs:
    """The completions `logprobs` object of `entries` for a request with `logprobs` (0-20);
    `offsets` carries `text_offset` across the chunks of one response."""
    ids, tokens, lps = entries.top_ids, entries.top_tokens, entries.top_logprobs
    out = CompletionLogprobs([], [], [], [])
    j = 0
    advance = offsets.advance
    for sid, token, lp, count in zip(entries.token_ids, entries.tokens, entries.logprobs, entries.top_counts):
        if not _FLOOR <= lp < _INF:
            lp = _clamped(lp)
        text = _text(token)
        top = {text: lp}
        n = 1
        for i in range(j, j + count):
            if n > logprobs:
                break
            if ids[i] != sid:
                x = lps[i]
                top[_text(tokens[i])] = x if _FLOOR <= x < _INF else _clamped(x)
                n += 1
        j += count
        out.text_offset.append(advance(token))
        out.token_logprobs.append(lp)
        out.tokens.append(text)
        out.top_logprobs.append(top)
    return out
