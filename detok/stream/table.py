"""All live requests of one worker, stepped one scheduler batch at a time.

Most rids in most steps carry one token whose bytes are whole characters, for a stream with nothing
held and no stop strings: for those the step is a few numpy gathers over the whole batch (the text of
every token id is precomputed). Every other rid goes through its own `DecodeStream.step`, which gives
the same text; the table keeps the two paths' counters in step.
"""

from __future__ import annotations

from collections.abc import Sequence
import operator
from collections import deque
from itertools import repeat
from typing import NamedTuple

import numpy as np

from detok.stream.byte_text import ByteTables, ByteTextDecoder, _utf8_decode
from detok.stream.decode_stream import DecodeStream
from detok.stream.params import DecodeParams, Delta, Finish
from detok.stream.strategy import Strategy, prepare_decoding
from detok.tokenizer.base import Tokenizer


class DuplicateRequest(KeyError):
    pass


class StepResult(NamedTuple):
    texts: list[str]
    offsets: list[int]
    num_tokens: list[int]
    finishes: list[Finish | None]


class _ModeTables:
    """Every byte-table mode in use, concatenated (mode m's id t at m * vocab + t) for numpy gathers."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.index: dict[int, int] = {}
        self.texts: list[str | None] = []
        self.whole = np.empty(0, dtype=bool)  # the id's bytes are whole characters
        self.lengths = np.empty(0, dtype=np.int64)
        self.byte_ok = np.empty(0, dtype=bool)  # not a special token that is its own spaced segment

    def mode_of(self, tables: ByteTables) -> int:
        m = self.index.get(id(tables))
        if m is None:
            m = self.index[id(tables)] = len(self.index)
            texts = tables.texts
            self.texts = self.texts + list(texts)
            self.whole = np.concatenate([self.whole, np.array([t is not None for t in texts], dtype=bool)])
            self.lengths = np.concatenate(
                [self.lengths, np.array([len(t) if t is not None else 0 for t in texts], dtype=np.int64)]
            )
            byte_ok = np.ones(len(texts), dtype=bool)
            if tables.spaced:
                byte_ok[[i for i in tables.special if 0 <= i < len(texts)]] = False
            self.byte_ok = np.concatenate([self.byte_ok, byte_ok])
        return m


class StreamTable:
    def __init__(self, tokenizer: Tokenizer, strategy: Strategy | None = None, capacity: int = 1024) -> None:
        self.tokenizer = tokenizer
        self.plan = prepare_decoding(tokenizer, strategy)
        self._strategy = strategy
        self._vocab = tokenizer.vocab_size
        self._streams: dict[str, DecodeStream] = {}
        self._slot_of: dict[str, int] = {}
        self._decoders: list[ByteTextDecoder | None] = [None] * capacity
        self._free: list[int] = list(range(capacity - 1, -1, -1))
        # Columnar state of the vectorized path; the stream objects hold everything else.
        self._fast = np.zeros(capacity, dtype=bool)  # one plain token can skip DecodeStream.step
        self._hold = np.zeros(capacity, dtype=bool)  # incomplete UTF-8 bytes are held
        self._eos_stops = np.zeros(capacity, dtype=bool)  # the stream stops on end-of-sequence ids
        self._mode = np.zeros(capacity, dtype=np.int64)
        self._ntok = np.zeros(capacity, dtype=np.int64)
        self._choff = np.zeros(capacity, dtype=np.int64)
        self._tables = _ModeTables(self._vocab)
        self._eos = frozenset(tokenizer.eos_token_ids)
        self._eos_mask = np.zeros(self._vocab, dtype=bool)
        for i in self._eos:
            if 0 <= i < self._vocab:
                self._eos_mask[i] = True

    # ---- registration -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, rid: object) -> bool:
        return rid in self._streams

    def stream(self, rid: str) -> DecodeStream:
        return self._streams[rid]

    def rids(self) -> list[str]:
        return list(self._streams)

    def open(
        self, rid: str, context_ids: Sequence[int] = (), params: DecodeParams | None = None, ignore_eos: bool = False
    ) -> DecodeStream:
        if rid in self._streams:
            raise DuplicateRequest(rid)
        stream = DecodeStream(self.tokenizer, context_ids, params, ignore_eos=ignore_eos, strategy=self._strategy)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._streams[rid] = stream
        self._slot_of[rid] = slot
        dec = stream._text
        self._decoders[slot] = dec if isinstance(dec, ByteTextDecoder) else None
        self._mode[slot] = self._tables.mode_of(dec._t) if isinstance(dec, ByteTextDecoder) else 0
        self._ntok[slot] = 0
        self._choff[slot] = 0
        self._sync(slot, stream)
        return stream

    def close(self, rid: str) -> None:
        slot = self._slot_of.pop(rid, None)
        if slot is None:
            return
        del self._streams[rid]
        self._decoders[slot] = None
        self._fast[slot] = False
        self._free.append(slot)

    def _grow(self) -> None:
        old = len(self._decoders)
        self._decoders.extend([None] * old)
        self._free.extend(range(2 * old - 1, old - 1, -1))
        for name in ("_fast", "_hold", "_eos_stops", "_mode", "_ntok", "_choff"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))

    def _sync(self, slot: int, stream: DecodeStream) -> None:
        """Columnar flags from the stream's own state, after it stepped on its own."""
        dec = stream._text
        self._fast[slot] = (
            stream._plain
            and not stream.finished
            and stream._stop_ids <= self._eos  # the vectorized path checks end-of-sequence ids only
            and isinstance(dec, ByteTextDecoder)
            and not dec._strip
            and not dec._after_special
            and dec._started
        )
        self._eos_stops[slot] = bool(stream._stop_ids)
        self._hold[slot] = isinstance(dec, ByteTextDecoder) and bool(dec._pending)

    # ---- stepping ---------------------------------------------------------------------------
    def step(
        self, rids: Sequence[str], starts: Sequence[int], counts: Sequence[int], tokens: Sequence[int]
    ) -> StepResult:
        n = len(rids)
        counts_a = np.asarray(counts, dtype=np.int64)
        tokens_a = np.asarray(tokens, dtype=np.int64)
        starts_a = np.asarray(starts, dtype=np.int64)
        if counts_a.shape != (n,) or starts_a.shape != (n,) or counts_a.sum() != len(tokens_a):
            raise ValueError("rids, starts and counts must align and counts must sum to len(tokens)")
        slots = np.fromiter(map(self._slot_of.get, rids, repeat(-1)), dtype=np.int64, count=n)
        firsts = np.cumsum(counts_a) - counts_a
        offsets = np.zeros(n, dtype=np.int64)
        ntoks = np.zeros(n, dtype=np.int64)
        finishes: list[Finish | None] = [None] * n

        # Rows that need no DecodeStream.step: a known plain stream, one token, in order, not a stop id.
        safe = np.where(slots >= 0, slots, 0)
        tok1 = tokens_a[np.minimum(firsts, len(tokens_a) - 1)] if len(tokens_a) else np.zeros(n, np.int64)
        elig = (slots >= 0) & (counts_a == 1) & self._fast[safe] & (starts_a == self._ntok[safe])
        elig &= (tok1 >= 0) & (tok1 < self._vocab)
        idx = np.empty(0, dtype=np.int64)
        if self._tables.index:  # some stream uses the byte table (a window-diff tokenizer has none)
            tok1 = np.where(elig, tok1, 0)
            elig &= ~(self._eos_mask[tok1] & self._eos_stops[safe])
            gi = self._mode[safe] * self._tables.vocab + tok1
            elig &= self._tables.byte_ok[gi]
            idx = np.flatnonzero(elig)
        else:
            elig[:] = False
        if len(idx) == n:
            texts = self._step_plain(idx, slots, tok1, gi, offsets, ntoks)
        else:
            texts = [""] * n
            if len(idx):
                plain = self._step_plain(idx, slots[idx], tok1[idx], gi[idx], offsets, ntoks)
                deque(map(texts.__setitem__, idx.tolist(), plain), maxlen=0)
        slow = np.flatnonzero(~elig)
        if len(slow):
            for k, slot, start, first, count in zip(
                slow.tolist(), slots[slow].tolist(), starts_a[slow].tolist(), firsts[slow].tolist(), counts_a[slow].tolist()
            ):
                text, offset, ntok, finishes[k] = self._step_one(rids[k], slot, start, tokens_a[first : first + count])
                texts[k] = text
                offsets[k] = offset
                ntoks[k] = ntok
        return StepResult(texts, offsets.tolist(), ntoks.tolist(), finishes)

    def _step_plain(
        self, idx: np.ndarray, slots: np.ndarray, toks: np.ndarray, gi: np.ndarray,
        offsets: np.ndarray, ntoks: np.ndarray,
    ) -> list[str]:
        """The rows `idx` (one plain token each): their texts; offsets and counts filled in."""
        tables = self._tables
        lens = tables.lengths[gi]
        whole = tables.whole[gi] & ~self._hold[slots]
        texts = list(map(tables.texts.__getitem__, gi.tolist()))
        partial = np.flatnonzero(~whole)
        if len(partial):
            # Held bytes or a token that is part of a character: the request's own UTF-8 bytes, in
            # C-level maps rather than a Python loop (byte-fallback runs make these common).
            decs = [self._decoders[k] for k in slots[partial].tolist()]
            datas = [d._pending + d._t.pieces[t] for d, t in zip(decs, toks[partial].tolist())]
            decoded = list(map(_utf8_decode, datas, repeat("replace"), repeat(False)))
            rests = [data[used:] for data, (_, used) in zip(datas, decoded)]
            ptexts = [text for text, _ in decoded]
            deque(map(setattr, decs, repeat("_pending"), rests), maxlen=0)
            deque(map(setattr, decs, repeat("_fast"), map(operator.not_, rests)), maxlen=0)
            deque(map(texts.__setitem__, partial.tolist(), ptexts), maxlen=0)
            lens[partial] = np.fromiter(map(len, ptexts), dtype=np.int64, count=len(ptexts))
            self._hold[slots[partial]] = np.fromiter(map(len, rests), dtype=np.int64, count=len(rests)) > 0
        offs = self._choff[slots]
        self._choff[slots] = offs + lens
        self._ntok[slots] += 1
        offsets[idx] = offs
        ntoks[idx] = self._ntok[slots]
        return texts  # type: ignore[return-value]  # every None was a partial row, now replaced

    def _step_one(self, rid: str, slot: int, start: int, ids_a: np.ndarray) -> tuple[str, int, int, Finish | None]:
        if slot < 0:
            return "", 0, 0, Finish("error", None, f"unknown request id {rid!r} (not registered, or already finished)")
        stream = self._streams[rid]
        stream.num_tokens = done = int(self._ntok[slot])
        stream.char_offset = int(self._choff[slot])
        if start > done:
            delta = stream.finish("error", f"tokens missing: expected start {done}, got {start}")
        else:
            # a replay: tokens this stream has already consumed are skipped
            new_ids = ids_a[done - start :].tolist() if done > start else ids_a.tolist()
            delta = stream.step(new_ids) if new_ids else Delta()  # wholly replayed: nothing new
        offset = stream.char_offset - len(delta.text)
        if delta.finish is not None:
            self.close(rid)
        else:
            self._ntok[slot] = stream.num_tokens
            self._choff[slot] = stream.char_offset
            self._sync(slot, stream)
        return delta.text, offset, stream.num_tokens, delta.finish

    def finish(self, rid: str, reason: str, message: str | None = None) -> tuple[str, int, int, Finish | None]:
        """End a request from the scheduler side (length, abort, ...): text released, state freed."""
        slot = self._slot_of.get(rid)
        if slot is None:
            return "", 0, 0, None
        stream = self._streams[rid]
        stream.num_tokens = int(self._ntok[slot])
        stream.char_offset = int(self._choff[slot])
        delta = stream.finish(reason, message)  # type: ignore[arg-type]
        self.close(rid)
        return delta.text, stream.char_offset - len(delta.text), stream.num_tokens, delta.finish
