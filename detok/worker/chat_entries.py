"""Chat logprobs rendered where the token strings are made: each entry's OpenAI JSON item.

A chat request that asks for logprobs (`Registration.logprobs_form == "chat"`, set by detok's
HTTP frontend) gets from its worker, per entry, the item its chunk carries -
`{"token":..,"logprob":..,"bytes":[..],"top_logprobs":[..]}` - instead of the token strings and
floats of its alternatives. The frontend then only joins byte strings: no `str` per token string,
no float per logprob, no writer pass (most of its logprob cost; docs/architecture.md, "A streamed
chunk's path"). The bytes are exactly the frontend writer's (`detok.streaming.chat_logprobs_json`,
tested against it): the same fragments (msgspec's JSON of the token string and of its bytes),
msgspec's float format, the same clamping and order.

`ChatFragments` keeps each id's two fragments, made the first time the id is seen (as
`TokenStrings` keeps its string); `render` writes a step's items in one compiled pass
(`_chatentries.c`), in Python without a compiler.
"""

from __future__ import annotations

from typing import Protocol

import msgspec
import numpy as np

try:  # the compiled writer (setup.py builds it; the Python one gives the same bytes)
    from detok._native._chatentries import render as _compiled_render
except ImportError:  # pragma: no cover - depends on the build
    _compiled_render = None

_encode = msgspec.json.encode
_ATTR = "_detok_chat_fragments"


class TokenStrings(Protocol):
    """A tokenizer's token strings as the fragments read them (`detok.worker.logprobs.TokenStrings`)."""

    vocab_size: int

    def string_and_bytes(self, token_id: int) -> tuple[str, bytes]: ...


class ChatFragments:
    """`{"token":T,"logprob":` and `,"bytes":[..]` of every id of one tokenizer, filled on first
    use (row `vocab_size`: an id outside the vocabulary, whose string is empty): the bytes in one
    growing buffer, and per id a row of the table (where its head starts, the head's and the tail's
    lengths; -1: not made)."""

    def __init__(self, strings: TokenStrings) -> None:
        self._strings = strings
        n = strings.vocab_size + 1
        self._table = np.full((n, 3), -1, dtype=np.int64)
        self._buf = np.zeros(1 << 16, dtype=np.uint8)
        self._used = 0
        self.compiled = _compiled_render is not None  # False: the Python writer (tests set it)

    @classmethod
    def of(cls, strings: TokenStrings) -> ChatFragments:
        """The fragments of `strings`' tokenizer, shared in this process."""
        table = getattr(strings, _ATTR, None)
        if table is None:
            table = cls(strings)
            setattr(strings, _ATTR, table)
        return table

    def fill(self, ids: np.ndarray) -> None:
        """Make the fragments of `ids` (uint32) not made yet."""
        if not len(ids):
            return
        idx = np.minimum(ids.astype(np.int64), self._strings.vocab_size)
        missing = self._table[idx, 1] < 0
        if missing.any():
            self._make(np.unique(idx[missing]).tolist())

    def _make(self, ids: list[int]) -> None:
        made = []
        for i in ids:
            text, data = self._strings.string_and_bytes(i)  # (an id past the vocabulary: "", b"")
            made.append((b'{"token":' + _encode(text) + b',"logprob":', b',"bytes":' + _encode(list(data))))
        blob = b"".join(h + t for h, t in made)
        end = self._used + len(blob)
        if end > len(self._buf):
            self._buf = np.concatenate([self._buf, np.zeros(max(end, len(self._buf)), dtype=np.uint8)])
        self._buf[self._used : end] = np.frombuffer(blob, dtype=np.uint8)
        heads = np.fromiter((len(h) for h, _ in made), dtype=np.int64, count=len(made))
        tails = np.fromiter((len(t) for _, t in made), dtype=np.int64, count=len(made))
        where = np.array(ids, dtype=np.int64)
        self._table[where, 0] = self._used + np.cumsum(heads + tails) - (heads + tails)
        self._table[where, 1], self._table[where, 2] = heads, tails
        self._used = end

    def fragments(self, token_id: int) -> tuple[bytes, bytes]:
        """(head, tail) of an id whose fragments are made."""
        at, head, tail = self._table[min(token_id, self._strings.vocab_size)].tolist()
        return self._buf[at : at + head].tobytes(), self._buf[at + head : at + head + tail].tobytes()

    def render(self, ids: np.ndarray, ks: np.ndarray, logprobs: np.ndarray, top_counts: np.ndarray,
               top_ids: np.ndarray, top_logprobs: np.ndarray) -> tuple[bytes, bytes]:
        """Every entry's item back to back and the uint32 byte length of each (0 where `ks` is -1:
        not rendered). `ids`, `top_counts`, `top_ids` uint32; `ks` int32; logprobs float32."""
        if int(top_counts.sum()) != len(top_ids) or not len(ids) == len(ks) == len(logprobs) == len(top_counts):
            raise ValueError("render: columns of different lengths (top_counts past the alternatives)")
        rendered = ks >= 0
        self.fill(ids[rendered])
        self.fill(top_ids[np.repeat(rendered, top_counts)])
        lps, tlps = logprobs.astype(np.float64), top_logprobs.astype(np.float64)
        lps_json, tlps_json = _encode(lps.tolist()), _encode(tlps.tolist())
        columns = (ids.astype("<u4"), ks.astype("<i4"), lps, top_counts.astype("<u4"), top_ids.astype("<u4"), tlps)
        if self.compiled:
            c = columns  # (astype's copies: contiguous)
            return _compiled_render(c[0], c[1], c[2], lps_json, c[3], c[4], c[5], tlps_json, self._table,
                                    self._buf[: self._used])
        return self._render_py(*columns)

    def _render_py(self, ids: np.ndarray, ks: np.ndarray, lps: np.ndarray, counts: np.ndarray, top_ids: np.ndarray,
                   tlps: np.ndarray) -> tuple[bytes, bytes]:
        def token(tid: int, v: float) -> bytes:
            head, tail = self.fragments(tid)
            value = _encode(v) if -9999.0 <= v < float("inf") else (b"0.0" if v == float("inf") else b"-9999.0")
            return head + value + tail

        items, j = [], 0
        for sid, k, v, count in zip(ids.tolist(), ks.tolist(), lps.tolist(), counts.tolist()):
            if k < 0:
                items.append(b"")
            elif k == 0:
                items.append(token(sid, v) + b',"top_logprobs":[]}')
            else:
                shown = [token(sid, v)]
                for tid, tv in zip(top_ids[j : j + count].tolist(), tlps[j : j + count].tolist()):
                    if len(shown) >= k:
                        break
                    if tid != sid:
                        shown.append(token(tid, tv))
                items.append(token(sid, v) + b',"top_logprobs":[' + b"},".join(shown) + b"}]}")
            j += count
        lengths = np.fromiter(map(len, items), dtype="<u4", count=len(items))
        return b"".join(items), lengths.tobytes()
