"""Logprob entries as a frontend receives them: per request, runs of consecutive output tokens,
each with its sampled id, OpenAI token string and logprob and its top alternatives.

`split_logprobs` cuts a `DeltaBatch.logprobs` (packed by the worker) into one `TokenLogprobs` per
entry-row; `DeltaReceiver` de-duplicates them by token index and hands them out on
`RequestDelta.logprobs`; `detok.streaming.logprobs_format` turns them into OpenAI's shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import msgspec
import numpy as np

from detok.wire.packing import split_text
from detok.wire.to_frontends import DeltaLogprobs

try:  # the compiled cut (setup.py builds it; without a compiler, `_rows_py`)
    from detok._native._logprobrows import rows as _rows
except ImportError:  # pragma: no cover - the tests run the Python cut too
    _rows = None

_RAW_PREFIX = "bytes:"


class RawToken(str):
    """A token string in OpenAI's `bytes:\\xNN...` form (the token's bytes are not whole UTF-8
    characters); `data` holds those bytes, which go into the response's `bytes` field."""

    data: bytes

    @classmethod
    def parse(cls, text: str) -> RawToken:
        """ValueError unless `text` is `bytes:` followed by `\\xNN` groups."""
        body = text[len(_RAW_PREFIX) :]
        if not text.startswith(_RAW_PREFIX) or len(body) % 4 or body[::4].strip("\\") or body[1::4].strip("x"):
            raise ValueError(f"not a bytes: token string: {text[:40]!r}")
        token = cls(text)
        token.data = bytes.fromhex(body.replace("\\x", ""))
        return token


def token_bytes(token: str) -> bytes:
    """The bytes a token string stands for (its UTF-8, or a RawToken's own bytes)."""
    return token.data if type(token) is RawToken else token.encode()


class TokenLogprobs(msgspec.Struct, gc=False):
    """Entries of consecutive output tokens of one request, from token number `first`. Entry i:
    `token_ids[i]`, `tokens[i]` (OpenAI token string), `logprobs[i]`, and `top_counts[i]`
    alternatives taken in order from the flattened `top_ids` / `top_tokens` / `top_logprobs`."""

    first: int
    token_ids: list[int]
    tokens: list[str]
    logprobs: list[float]
    top_counts: list[int]
    top_ids: list[int]
    top_tokens: list[str]
    top_logprobs: list[float]
    # each entry's chat JSON item, rendered by the worker (a request with logprobs_form "chat",
    # detok.worker.chat_entries): its `tokens` are then empty and its alternatives not sent. None:
    # not rendered.
    items: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def end(self) -> int:
        """Output index after the last entry."""
        return self.first + len(self.token_ids)

    def tail(self, start: int) -> TokenLogprobs:
        """The entries from output index `start` on (`start` within this run)."""
        skip = start - self.first
        if skip <= 0:
            return self
        cut = sum(self.top_counts[:skip])
        return TokenLogprobs(
            start, self.token_ids[skip:], self.tokens[skip:], self.logprobs[skip:], self.top_counts[skip:],
            self.top_ids[cut:], self.top_tokens[cut:], self.top_logprobs[cut:],
            self.items[skip:] if self.items is not None else None,
        )

    def named_by_id(self, chat: bool) -> TokenLogprobs:
        """The same entries with every token written `token_id:{id}` (vLLM's
        `return_tokens_as_token_ids`: a token that is not valid text is still told apart). In chat,
        a sampled token keeps its own `bytes` (vLLM's `_create_chat_logprobs` takes them from the
        decoded token; the alternatives' are the placeholder's): a RawToken carrying them."""
        tokens: list[str] = []
        for i, token in zip(self.token_ids, self.tokens):
            named = f"token_id:{i}"
            if chat:
                named = RawToken(named)
                named.data = token_bytes(token)
            tokens.append(named)
        return TokenLogprobs(self.first, self.token_ids, tokens, self.logprobs,
                             self.top_counts, self.top_ids, [f"token_id:{i}" for i in self.top_ids], self.top_logprobs)

    @classmethod
    def concat(cls, runs: Sequence[TokenLogprobs]) -> TokenLogprobs:
        """Runs that follow each other as one (the first run's `first`)."""
        if len(runs) == 1:
            return runs[0]
        out = cls(runs[0].first, [], [], [], [], [], [], [], [] if runs[0].items is not None else None)
        for r in runs:
            if out.items is not None:
                if r.items is None:
                    raise ValueError("logprob entries: rendered and unrendered runs of one request")
                out.items += r.items
            out.token_ids += r.token_ids
            out.tokens += r.tokens
            out.logprobs += r.logprobs
            out.top_counts += r.top_counts
            out.top_ids += r.top_ids
            out.top_tokens += r.top_tokens
            out.top_logprobs += r.top_logprobs
        return out


EntryRow = tuple[int, "TokenLogprobs", int, "list[bytes] | None"]


def split_logprobs(lp: DeltaLogprobs) -> list[EntryRow]:
    """(rid, entries, first, items) per entry-row of a DeltaBatch's logprobs: the entries, and
    beside them their first token index and rendered chat items (None: not rendered), which the
    frontend's compiled push (`push_rows`) takes as they are; ValueError if the columns do not fit
    together (nothing is returned then)."""
    u32 = lambda b: np.frombuffer(b, dtype="<u4").tolist()  # noqa: E731
    f32 = lambda b: np.frombuffer(b, dtype="<f4").tolist()  # noqa: E731
    try:
        rids = np.frombuffer(lp.rids, dtype="<u8").tolist()
        firsts, counts, ids, tcs, tids, raw = map(u32, (lp.firsts, lp.counts, lp.token_ids, lp.top_counts, lp.top_ids, lp.raw))
        lps, tlps = f32(lp.logprobs), f32(lp.top_logprobs)
        strings = split_text(lp.text, lp.lengths)
    except ValueError as e:
        raise ValueError(f"logprob columns: {e}") from None
    n, n_top = len(ids), len(tids)
    if not (len(firsts) == len(counts) == len(rids) and sum(counts) == n == len(lps) == len(tcs)):
        raise ValueError("logprob columns: entry-rows and entries do not fit together")
    if not (sum(tcs) == n_top == len(tlps) and len(strings) == n + n_top):
        raise ValueError("logprob columns: alternatives and strings do not fit together")
    for i in raw:
        if i >= len(strings):
            raise ValueError("logprob columns: a bytes: index past the strings")
        strings[i] = RawToken.parse(strings[i])
    tokens, top_tokens = strings[:n], strings[n:]
    rendered = bool(lp.item_lengths or lp.items)
    if _rows is not None:
        if rendered:  # (the items cut per row in the same pass)
            return _rows(TokenLogprobs, rids, firsts, counts, ids, tokens, lps, tcs, tids, top_tokens, tlps,
                         lp.items, lp.item_lengths)
        return _rows(TokenLogprobs, rids, firsts, counts, ids, tokens, lps, tcs, tids, top_tokens, tlps)
    out = _rows_py(rids, firsts, counts, ids, tokens, lps, tcs, tids, top_tokens, tlps)
    if rendered:
        _attach_items(out, counts, lp.items, lp.item_lengths, n)
    return out


def _attach_items(rows: list[EntryRow], counts: list[int], items: bytes, item_lengths: bytes,
                  n: int) -> None:
    """Each rendered entry-row's items (`DeltaLogprobs.items`), cut from the blob; ValueError if
    the lengths do not fit it, or a row is partly rendered."""
    try:
        lengths = np.frombuffer(item_lengths, dtype="<u4").astype(np.int64)
    except ValueError as e:
        raise ValueError(f"logprob columns: item lengths: {e}") from None
    if len(lengths) != n or int(lengths.sum()) != len(items):
        raise ValueError("logprob columns: chat items and entries do not fit together")
    if not n:
        return
    per_row = np.asarray(counts, dtype=np.int64)
    firsts = np.cumsum(per_row) - per_row
    # rendered entries per row (rows with no entries count as none): all of the row's, or none
    rendered = np.add.reduceat((lengths > 0).astype(np.int64), np.minimum(firsts, n - 1)) * (per_row > 0)
    if bool(((rendered != 0) & (rendered != per_row)).any()):
        raise ValueError("logprob columns: an entry-row partly rendered")
    ends = np.cumsum(lengths).tolist()
    cut = [items[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    for k, (row, first, count, has) in enumerate(zip(rows, firsts.tolist(), counts, rendered.tolist())):
        if has:
            rid, entries, start, _ = row
            entries.items = cut[first : first + count]
            rows[k] = (rid, entries, start, entries.items)


def _rows_py(rids: list[int], firsts: list[int], counts: list[int], ids: list[int], tokens: list[str],
             lps: list[float], tcs: list[int], tids: list[int], top_tokens: list[str],
             tlps: list[float]) -> list[EntryRow]:
    """The entries cut per entry-row in Python (columns already checked to fit)."""
    top_ends = list(accumulate(tcs, initial=0))
    out = []
    e = 0
    for rid, first, count in zip(rids, firsts, counts):
        a, b = top_ends[e], top_ends[e + count]
        out.append((rid, TokenLogprobs(
            first, ids[e : e + count], tokens[e : e + count], lps[e : e + count], tcs[e : e + count],
            tids[a:b], top_tokens[a:b], tlps[a:b],
        ), first, None))
        e += count
    return out
