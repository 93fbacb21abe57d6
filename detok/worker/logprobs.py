"""Logprob entries on the worker: token ids -> OpenAI token strings, no decode per token.

In vLLM and SGLang the API server turns every sampled and top-k id into its string, k+1 decodes
per token on the busiest process. Here the worker does it, from a per-tokenizer table filled the
first time an id is seen, and sends the strings packed next to the deltas (`DeltaLogprobs`): per
batch a few numpy passes over the logprob columns and one gather of the strings' bytes (compiled
in `_tokenstrings.c` when built, numpy otherwise).

A token's string (`openai_token`) is its bytes as text when they are whole UTF-8 characters (what
vLLM's `decode([id])` gives, special tokens by their content, a SentencePiece piece with its
leading space); a token whose bytes are not whole characters (part of a multi-byte character, a
byte-fallback token, an invalid byte) is named by its bytes as OpenAI does, `bytes:\\xe5\\x8c`, and
the frontend gives the raw bytes in `bytes`. (vLLM gives such a token "" and empty bytes, and the
token that completes the character the whole character; see docs/http-api.md, "Logprobs", for why
detok differs.)
Tokenizers without a byte table (window strategy) give `decode([id])`, as vLLM does.

Which tokens get entries: every output token the request's stream consumed in this batch - the
token that completes a stop string, the EOS / stop token that ends a request (its text hidden) -
and none for tokens after the one that ended the request (vLLM's output processor also gives the
rest of that step's tokens, so its entries depend on how tokens were grouped into steps; here they
do not, and a replay gives the same entries), for requests that already finished (late tokens the
worker ignores) or that did not ask.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from itertools import repeat

import numpy as np

from detok.stream.strategy import prepare_decoding
from detok.tokenizer.base import Tokenizer
from detok.worker.chat_entries import ChatFragments
from detok.wire.to_frontends import DeltaLogprobs
from detok.wire.to_workers import MAX_TOP_LOGPROBS, StepLogprobs

try:  # the compiled gather (optional extension); the numpy one gives the same bytes
    from detok._native._tokenstrings import gather as _compiled_gather
except ImportError:  # pragma: no cover - depends on the build
    _compiled_gather = None

_ATTR = "_detok_token_strings"
_EMPTY = np.empty(0, dtype=np.int64)


def openai_token(data: bytes) -> tuple[str, bool]:
    """(token string, named by its bytes?) of a token's bytes: the text when they are whole UTF-8
    characters, else OpenAI's `bytes:` form with every byte as `\\xNN`."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data), True


class TokenStrings:
    """The OpenAI string of every id of one tokenizer, as UTF-8 in one growing buffer, filled the
    first time an id is seen (index `vocab_size`: any id outside the vocabulary, whose string is
    empty, as vLLM's decode gives)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        plan = prepare_decoding(tokenizer)
        self._tokenizer = tokenizer
        self._pieces = plan.decoding.pieces if plan.decoding is not None else None
        n = self.vocab_size = tokenizer.vocab_size
        self._filled = np.zeros(n + 1, dtype=bool)
        self._filled[n] = True
        self._offset = np.zeros(n + 1, dtype=np.int64)
        self._nbytes = np.zeros(n + 1, dtype=np.int64)
        self._nchars = np.zeros(n + 1, dtype=np.uint32)
        self._raw = np.zeros(n + 1, dtype=bool)
        self._buf = np.zeros(1 << 16, dtype=np.uint8)
        self._used = 0
        self.compiled = _compiled_gather is not None  # False: the numpy gather (tests set it)

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> TokenStrings:
        """The table of `tokenizer`, shared by everything in this process that uses it."""
        table = getattr(tokenizer, _ATTR, None)
        if table is None:
            table = cls(tokenizer)
            setattr(tokenizer, _ATTR, table)
        return table

    def string(self, token_id: int) -> tuple[str, bool]:
        """(OpenAI token string, named by its bytes?) of one id."""
        if not 0 <= token_id < self.vocab_size:
            return "", False
        if self._pieces is not None:
            return openai_token(self._pieces[token_id])
        return self._tokenizer.decode([token_id], skip_special_tokens=False), False

    def string_and_bytes(self, token_id: int) -> tuple[str, bytes]:
        """(OpenAI token string, the bytes it stands for: a `bytes:` string's own) of one id."""
        text, raw = self.string(token_id)
        return text, (self._pieces[token_id] if raw and self._pieces is not None else text.encode())

    def gather(self, ids: np.ndarray) -> tuple[bytes, bytes, bytes]:
        """The strings of `ids` (int64) in order: (UTF-8 blob, uint32 char lengths, uint32
        indices of the `bytes:` strings), packed."""
        idx = ids
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            idx = np.where((ids >= 0) & (ids < self.vocab_size), ids, self.vocab_size)
        missing = ~self._filled[idx]
        if missing.any():
            self._fill(np.unique(idx[missing]).tolist())
        if self.compiled:
            blob = _compiled_gather(idx, self._offset, self._nbytes, self._buf)
        else:
            # each string's bytes, back to back: a position per output byte, one numpy gather
            nbytes = self._nbytes[idx]
            shift = self._offset[idx] - (np.cumsum(nbytes) - nbytes)
            blob = self._buf[np.repeat(shift, nbytes) + np.arange(int(nbytes.sum()))].tobytes()
        raw = np.flatnonzero(self._raw[idx])
        return blob, self._nchars[idx].astype("<u4").tobytes(), raw.astype("<u4").tobytes()

    def _fill(self, ids: list[int]) -> None:
        """The strings of ids seen for the first time, written in one go (a batch can bring
        thousands: alternatives spread over the vocabulary)."""
        made = [self.string(i) for i in ids]
        data = [text.encode() for text, _ in made]
        nbytes = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
        end = self._used + int(nbytes.sum())
        if end > len(self._buf):
            self._buf = np.concatenate([self._buf, np.zeros(max(end, len(self._buf)), dtype=np.uint8)])
        self._buf[self._used : end] = np.frombuffer(b"".join(data), dtype=np.uint8)
        where = np.array(ids, dtype=np.int64)
        self._offset[where] = self._used + np.cumsum(nbytes) - nbytes
        self._nbytes[where] = nbytes
        self._nchars[where] = [len(text) for text, _ in made]
        self._raw[where] = [raw for _, raw in made]
        self._filled[where] = True
        self._used = end


def check_step_logprobs(lp: StepLogprobs, n_rows: int, counts: bytes) -> str | None:
    """None if a batch's logprob columns fit its rows and each other, else what is wrong."""
    for name in ("rows", "sampled", "top_counts", "top_ids", "top_logprobs"):
        if len(getattr(lp, name)) % 4:
            return f"logprob column {name} is {len(getattr(lp, name))} bytes"
    rows = np.frombuffer(lp.rows, dtype="<u4").astype(np.int64)
    if len(rows) and (rows[-1] >= n_rows or bool((np.diff(rows) <= 0).any())):
        return "logprob rows are not ascending indices of the batch's rows"
    n_tok = len(rows) if not counts else int(np.frombuffer(counts, dtype="<u4")[rows].sum(dtype=np.int64))
    top_counts = np.frombuffer(lp.top_counts, dtype="<u4")
    if len(lp.sampled) != 4 * n_tok or len(top_counts) != n_tok:
        return f"{n_tok} tokens in the logprob rows, {len(lp.sampled) // 4} logprobs and {len(top_counts)} top counts"
    if n_tok and int(top_counts.max()) > MAX_TOP_LOGPROBS:
        return f"more than {MAX_TOP_LOGPROBS} alternatives for a token"
    n_top = int(top_counts.sum(dtype=np.int64))
    if len(lp.top_ids) != 4 * n_top or len(lp.top_logprobs) != 4 * n_top:
        return f"top counts add up to {n_top}, but {len(lp.top_ids) // 4} ids and {len(lp.top_logprobs) // 4} logprobs"
    return None


def wishes(wanted: Mapping[int, int], rids: Sequence[int]) -> np.ndarray:
    """Alternatives each request asked for (`wanted`: rid -> k of the live requests that asked),
    capped; -1 for the others."""
    out = np.fromiter(map(wanted.get, rids, repeat(-1)), dtype=np.int64, count=len(rids))
    return np.minimum(out, MAX_TOP_LOGPROBS)


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.cumsum(counts) - counts


def _within(counts: np.ndarray) -> np.ndarray:
    """Each element's position within its group, for groups of `counts` elements."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(_starts(counts), counts) if total else _EMPTY


def step_entries(
    strings: TokenStrings,
    lp: StepLogprobs,
    rids: bytes,
    starts: bytes,
    counts: bytes,
    tokens: bytes,
    num_tokens: bytes,
    tags: bytes,
    wanted: Mapping[int, int],
    chat: Container[int] = frozenset(),
) -> list[tuple[int, DeltaLogprobs]]:
    """The logprob entries of one stepped batch, per frontend tag: for each listed row, its tokens
    that the request's stream consumed (`num_tokens`, the row's output count after the step), for
    the requests in `wanted` (rid -> alternatives asked for); those in `chat` rendered as chat
    JSON items (`detok.worker.chat_entries`)."""
    rows = np.frombuffer(lp.rows, dtype="<u4").astype(np.int64)
    if not len(rows):
        return []
    row_rids = np.frombuffer(rids, dtype="<u8")[rows]
    start = np.frombuffer(starts, dtype="<u4")[rows].astype(np.int64)
    tag = np.frombuffer(tags, dtype="<u4")[rows]
    k = wishes(wanted, row_rids.tolist())
    # entries: the row's tokens up to the request's count after the step (replayed ones included:
    # the receiver drops what it has), none for unknown / finished / unwilling requests
    consumed = np.frombuffer(num_tokens, dtype="<u4")[rows].astype(np.int64) - start
    top_counts = np.frombuffer(lp.top_counts, dtype="<u4").astype(np.int64)
    if counts:  # several tokens per row (speculative decoding)
        per_row = np.frombuffer(counts, dtype="<u4").astype(np.int64)
        cnt = per_row[rows]
        n_entries = np.clip(consumed, 0, cnt)
        n_entries[(k < 0) | (tag == 0)] = 0
        within = _within(cnt)
        keep = within < np.repeat(n_entries, cnt)  # per token of the listed rows
        token_at = (np.repeat(_starts(per_row)[rows], cnt) + within)[keep]
        cap = np.minimum(top_counts, np.repeat(k, cnt))
    else:  # one token per row: a token is a row
        n_entries = ((consumed > 0) & (k >= 0) & (tag != 0)).astype(np.int64)
        keep = n_entries > 0
        token_at = rows[keep]
        cap = np.minimum(top_counts, k)
    if not keep.any():
        return []
    every = bool(keep.all())
    token_ids = np.frombuffer(tokens, dtype="<u4")[token_at]
    sampled = np.frombuffer(lp.sampled, dtype="<f4")
    top_ids = np.frombuffer(lp.top_ids, dtype="<u4")
    top_lps = np.frombuffer(lp.top_logprobs, dtype="<f4")
    if not every:
        sampled = sampled[keep]
        cap = np.where(keep, cap, 0)
    if not bool((cap == top_counts).all()):  # alternatives beyond a request's k, or of dropped tokens
        top_keep = _within(top_counts) < np.repeat(cap, top_counts)
        top_ids, top_lps = top_ids[top_keep], top_lps[top_keep]
    if not every:
        cap = cap[keep]
    has = n_entries > 0
    row_rids, start, tag, n_entries, k = row_rids[has], start[has], tag[has], n_entries[has], k[has]
    # per entry-row: the k of a row rendered as chat JSON, -1 for the others (None: no such row)
    chat_k = None
    if chat:
        is_chat = np.fromiter(map(chat.__contains__, row_rids.tolist()), dtype=bool, count=len(row_rids))
        chat_k = np.where(is_chat, k, -1) if is_chat.any() else None
    if bool((tag == tag[0]).all()):
        return [(int(tag[0]), _pack(strings, row_rids, start, n_entries, token_ids, sampled, cap, top_ids, top_lps, chat_k))]
    parts = []
    entry_tag = np.repeat(tag, n_entries)
    top_tag = np.repeat(entry_tag, cap)
    for t in np.unique(tag).tolist():
        r, e, x = tag == t, entry_tag == t, top_tag == t
        parts.append((t, _pack(strings, row_rids[r], start[r], n_entries[r], token_ids[e], sampled[e], cap[e], top_ids[x],
                               top_lps[x], chat_k[r] if chat_k is not None else None)))
    return parts


def _pack(
    strings: TokenStrings, rids: np.ndarray, firsts: np.ndarray, counts: np.ndarray, token_ids: np.ndarray,
    sampled: np.ndarray, top_counts: np.ndarray, top_ids: np.ndarray, top_lps: np.ndarray,
    chat_k: np.ndarray | None = None,
) -> DeltaLogprobs:
    string_ids = token_ids
    items = item_lengths = b""
    if chat_k is not None:
        # rendered entries carry their items, and neither token strings nor alternatives
        ks = np.repeat(chat_k, counts)
        items, item_lengths = ChatFragments.of(strings).render(token_ids, ks, sampled, top_counts, top_ids, top_lps)
        rendered = ks >= 0
        others = ~np.repeat(rendered, top_counts)
        top_ids, top_lps, top_counts = top_ids[others], top_lps[others], np.where(rendered, 0, top_counts)
        string_ids = np.where(rendered, -1, token_ids.astype(np.int64))  # (outside the vocabulary: "")
    text, lengths, raw = strings.gather(np.concatenate([string_ids, top_ids]).astype(np.int64))
    return DeltaLogprobs(
        rids.astype("<u8").tobytes(), firsts.astype("<u4").tobytes(), counts.astype("<u4").tobytes(),
        token_ids.astype("<u4").tobytes(), sampled.astype("<f4").tobytes(), top_counts.astype("<u4").tobytes(),
        top_ids.astype("<u4").tobytes(), top_lps.astype("<f4").tobytes(), text, lengths, raw, items, item_lengths,
    )


def join_parts(parts: list[DeltaLogprobs]) -> DeltaLogprobs:
    """Several parts for one frontend as one: the strings regrouped (every entry's, then every
    alternative's) and the string indices of `raw` renumbered. (One part per batch is the rule;
    this is the rare path, hence the decode.)"""
    if len(parts) == 1:
        return parts[0]
    heads, tails, head_lens, tail_lens, raw_heads, raw_tails = [], [], [], [], [], []
    n_heads = sum(len(p.token_ids) // 4 for p in parts)
    base_head = base_tail = 0
    for p in parts:
        n = len(p.token_ids) // 4
        lengths = np.frombuffer(p.lengths, dtype="<u4")
        text = p.text.decode()
        cut = int(lengths[:n].sum())
        heads.append(text[:cut])
        tails.append(text[cut:])
        head_lens.append(p.lengths[: 4 * n])
        tail_lens.append(p.lengths[4 * n :])
        raw = np.frombuffer(p.raw, dtype="<u4").astype(np.int64)
        raw_heads.append(raw[raw < n] + base_head)
        raw_tails.append(raw[raw >= n] - n + n_heads + base_tail)
        base_head += n
        base_tail += len(lengths) - n
    join = b"".join
    columns = [join(getattr(p, name) for p in parts) for name in DeltaLogprobs.__struct_fields__[:8]]
    raw = np.concatenate(raw_heads + raw_tails).astype("<u4").tobytes()
    # chat items: a length per entry in every part once one part has any (0: not rendered)
    item_lengths = b""
    if any(p.item_lengths for p in parts):
        item_lengths = join(p.item_lengths or bytes(len(p.token_ids)) for p in parts)
    return DeltaLogprobs(*columns, ("".join(heads) + "".join(tails)).encode(), join(head_lens + tail_lens), raw,
                         join(p.items for p in parts), item_lengths)
