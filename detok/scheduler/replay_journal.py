"""What one worker's shard was sent, kept so that a replacement process can be rebuilt exactly.

The scheduler client appends every step's packed columns for a worker (the very `bytes` objects it
encodes into the `DetokBatch`, kept by reference: no copy, no per-row work on the hot path). Each
appended step is a *chunk* with a running number. A request's rows all lie in chunks numbered from
the one current when it was registered (its `first` chunk) onwards, so every chunk older than the
oldest request still kept ("low water") holds nothing anyone needs and is dropped whole - O(1) per
step. In steady serving that alone bounds the journal to the steps since the oldest kept request
started.

A long-running request holds the low water back while short ones come and go around it; then the
journal would keep their rows too. The journal knows how many rows its kept requests can need at
most (each spans the chunks since its first: kept x chunks - the sum of their firsts); when it
holds more than twice that (and more than `COMPACT_MIN_ROWS`), it is compacted: the rows of the
kept requests, grouped one row per request (4 bytes per token id), everything else dropped. At
least half of what a compaction reads is garbage, so its cost (a few vectorised numpy operations
per row) is amortised O(1) per row, and a workload whose requests are all alike never pays it.

Cost in memory: 16 bytes per token id while in chunks (8-byte rid, 4-byte start, 4-byte id; a
speculative row adds 4 bytes of count), 4 bytes per id plus 16 per request once compacted.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Final, NamedTuple

import numpy as np

from detok.wire.to_workers import StepLogprobs

COMPACT_MIN_ROWS: Final = 1 << 20  # per worker: a journal of fewer rows is never compacted

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class Columns(NamedTuple):
    """A step's packed columns, as `DetokBatch` carries them (`counts` empty: one id per row), and
    the logprobs of the rows of requests that asked for them."""

    rids: bytes  # uint64 per row
    starts: bytes  # uint32 per row
    counts: bytes  # uint32 per row, or b""
    tokens: bytes  # uint32 ids, flattened
    logprobs: StepLogprobs | None = None

    @property
    def nbytes(self) -> int:
        n = len(self.rids) + len(self.starts) + len(self.counts) + len(self.tokens)
        lp = self.logprobs
        if lp is not None:
            n += len(lp.rows) + len(lp.sampled) + len(lp.top_counts) + len(lp.top_ids) + len(lp.top_logprobs)
        return n


EMPTY: Final = Columns(b"", b"", b"", b"")


class ShardJournal:
    """The chunks of one worker's shard; `columns(keep)` rebuilds what `keep`'s requests were sent.

    The owner says which requests are kept: `register` when one joins (it returns the request's
    first chunk), `release(first)` when one is no longer kept, and `trim(kept)` after appending."""

    def __init__(self) -> None:
        self._chunks: collections.deque[tuple[int, Columns]] = collections.deque()
        self._next = 0  # number of the next chunk
        self._bytes = 0
        self._rows = 0
        # (first chunk, rid) of every request that may still be needed; stale entries (requests
        # no longer kept) are dropped lazily when they reach the top
        self._firsts: list[tuple[int, int]] = []
        self._kept = 0  # requests kept, and the sum of their first chunks: what they can need
        self._kept_firsts = 0
        self.compactions = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def chunks(self) -> int:
        return len(self._chunks)

    def register(self, rid: int) -> int:
        """A request joins the shard: its rows start from the next chunk (returned)."""
        heapq.heappush(self._firsts, (self._next, rid))
        self._kept += 1
        self._kept_firsts += self._next
        return self._next

    def release(self, first: int) -> None:
        """A request registered at chunk `first` is no longer kept."""
        self._kept -= 1
        self._kept_firsts -= first

    def append(self, columns: Columns) -> None:
        self._chunks.append((self._next, columns))
        self._next += 1
        self._bytes += columns.nbytes
        self._rows += len(columns.rids) // 8

    def trim(self, kept: Container[int] | Callable[[int, int], bool], kept_rids: Callable[[], Iterable[int] | Mapping[int, int]]) -> None:
        """Drop the chunks no kept request can be in; compact when most rows are garbage.
        `kept` answers membership (of a rid, or of (first chunk, rid): a rid registered again
        since is not the request that entry was for); `kept_rids()` lists the kept requests
        (rid -> first chunk, or rids; called to compact)."""
        firsts = self._firsts
        is_kept = kept if callable(kept) else (lambda first, rid: rid in kept)  # type: ignore[operator]
        while firsts and not is_kept(*firsts[0]):
            heapq.heappop(firsts)
        low = firsts[0][0] if firsts else self._next
        chunks = self._chunks
        while chunks and chunks[0][0] < low:
            dropped = chunks.popleft()[1]
            self._bytes -= dropped.nbytes
            self._rows -= len(dropped.rids) // 8
        needed = self._kept * self._next - self._kept_firsts  # rows the kept requests can hold
        if self._rows > max(COMPACT_MIN_ROWS, 2 * needed):
            self._compact(kept_rids())

    def _compact(self, keep: Iterable[int] | Mapping[int, int]) -> None:
        last = self._chunks[-1][0]
        merged = _group(self._chunks, *_wanted(keep))
        self._chunks.clear()
        self._chunks.append((last, merged))  # numbered as the newest chunk it replaced
        self._bytes = merged.nbytes
        self._rows = len(merged.rids) // 8
        self.compactions += 1

    def columns(self, keep: Iterable[int] | Mapping[int, int]) -> Columns:
        """Every row sent for the requests in `keep`, one row per request (its ids in order).
        `keep` maps rid -> its first chunk (rows of a rid in older chunks belong to an earlier
        request with the same rid and are left out), or lists rids (every row of theirs)."""
        wanted, firsts = _wanted(keep)
        if not len(wanted) or not self._chunks:
            return EMPTY
        return _group(self._chunks, wanted, firsts)


def _wanted(keep: Iterable[int] | Mapping[int, int]) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(keep, Mapping):
        return np.fromiter(keep.keys(), dtype=np.uint64, count=len(keep)), np.fromiter(keep.values(), dtype=np.int64, count=len(keep))
    return np.fromiter(keep, dtype=np.uint64), None


def _member(rids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows whose rid is wanted, index of that rid in `wanted`) by a hash table, one probe per
    row (numpy's isin sorts and an unsorted searchsorted cannot binary-search: both cost more per row)."""
    bits = max(10, int(len(wanted)).bit_length() + 4)
    shift = np.uint64(64 - bits)
    with np.errstate(over="ignore"):
        wanted_h = ((wanted * _GOLDEN) >> shift).astype(np.intp)
        row_h = ((rids * _GOLDEN) >> shift).astype(np.intp)
    table = np.zeros(1 << bits, dtype=np.uint64)
    index = np.zeros(1 << bits, dtype=np.intp)
    table[wanted_h] = wanted
    index[wanted_h] = np.arange(len(wanted))
    hit = table[row_h] == rids
    where = index[row_h]
    shared = np.bincount(wanted_h, minlength=1 << bits) > 1  # buckets two wanted rids share
    if shared.any():
        rows = np.flatnonzero(shared[row_h])
        order = np.argsort(wanted)
        pos = np.minimum(np.searchsorted(wanted, rids[rows], sorter=order), len(wanted) - 1)
        hit[rows] = wanted[order[pos]] == rids[rows]
        where[rows] = order[pos]
    return hit, where


def _group(chunks: Iterable[tuple[int, Columns]], wanted: np.ndarray, firsts_of: np.ndarray | None = None) -> Columns:
    """The rows of `wanted` rids, grouped by rid (in `wanted`'s order), contiguous runs merged;
    with `firsts_of`, only the rows of chunks numbered from `firsts_of[i]` on for `wanted[i]`."""
    chunks = list(chunks)
    parts = [c for _, c in chunks]
    rids = np.frombuffer(b"".join(c.rids for c in parts), dtype="<u8")
    starts = np.frombuffer(b"".join(c.starts for c in parts), dtype="<u4").astype(np.int64)
    part_counts = [
        np.frombuffer(c.counts, dtype="<u4") if c.counts else np.ones(len(c.rids) // 8, dtype="<u4") for c in parts
    ]
    counts = np.concatenate(part_counts).astype(np.int64) if parts else np.empty(0, np.int64)
    tokens = np.frombuffer(b"".join(c.tokens for c in parts), dtype="<u4")
    hit, where = _member(rids, wanted)
    if firsts_of is not None and len(rids):
        chunk_of_row = np.repeat(np.fromiter((n for n, _ in chunks), dtype=np.int64), [len(c.rids) // 8 for c in parts])
        hit &= chunk_of_row >= firsts_of[where]
    rows = np.flatnonzero(hit)
    key = where[rows].astype(np.uint16 if len(wanted) <= 1 << 16 else np.uint32)  # radix-sorted when 16-bit
    rows = rows[np.argsort(key, kind="stable")]  # by request, each in sending order
    firsts = (np.cumsum(counts) - counts)[rows]
    n = counts[rows]
    # the ids of the selected rows, in that order
    take = _segments(firsts, n)
    out_tokens = tokens[take]
    # merge each request's consecutive rows (next start == previous start + count) into one
    r, s = rids[rows], starts[rows]
    joins = (r[1:] == r[:-1]) & (s[1:] == s[:-1] + n[:-1])
    heads = np.flatnonzero(np.concatenate([[True], ~joins])) if len(rows) else np.empty(0, np.intp)
    merged_counts = np.add.reduceat(n, heads) if len(heads) else np.empty(0, np.int64)
    per_token = _token_logprobs(parts, part_counts)
    return Columns(
        r[heads].astype("<u8").tobytes(),
        s[heads].astype("<u4").tobytes(),
        merged_counts.astype("<u4").tobytes(),
        out_tokens.astype("<u4", copy=False).tobytes(),
        None if per_token is None else per_token.regrouped(take, merged_counts),
    )


def _segments(firsts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices of consecutive segments [firsts[i], firsts[i] + lengths[i]), one after the other."""
    return np.repeat(firsts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))


class _TokenLogprobs(NamedTuple):
    """Logprob columns spread over every token of a journal (NaN and no alternatives for tokens
    whose row carried none), so they can follow the tokens when rows are regrouped."""

    has: np.ndarray  # bool per token
    sampled: np.ndarray  # float32 per token
    top_counts: np.ndarray  # int64 per token
    top_ids: np.ndarray  # uint32, flattened in token order
    top_logprobs: np.ndarray  # float32, flattened

    def regrouped(self, take: np.ndarray, row_counts: np.ndarray) -> StepLogprobs | None:
        """The StepLogprobs of rows made of the tokens `take` (`row_counts` tokens each): a row is
        listed if any of its tokens had logprobs."""
        has = self.has[take]
        if not has.any():
            return None
        bounds = np.cumsum(row_counts) - row_counts
        listed = np.add.reduceat(has.astype(np.int64), bounds) > 0
        keep = take[np.repeat(listed, row_counts)]
        counts = self.top_counts[keep]
        tops = _segments((np.cumsum(self.top_counts) - self.top_counts)[keep], counts)
        return StepLogprobs(
            np.flatnonzero(listed).astype("<u4").tobytes(),
            self.sampled[keep].astype("<f4", copy=False).tobytes(),
            counts.astype("<u4").tobytes(),
            self.top_ids[tops].astype("<u4", copy=False).tobytes(),
            self.top_logprobs[tops].astype("<f4", copy=False).tobytes(),
        )


def _token_logprobs(parts: list[Columns], part_counts: list[np.ndarray]) -> _TokenLogprobs | None:
    if all(c.logprobs is None for c in parts):
        return None
    has, sampled, top_counts, top_ids, top_lps = [], [], [], [], []
    for c, row_counts in zip(parts, part_counts):
        n_tok = len(c.tokens) // 4
        mask = np.zeros(n_tok, dtype=bool)
        values = np.full(n_tok, np.nan, dtype=np.float32)
        counts = np.zeros(n_tok, dtype=np.int64)
        lp = c.logprobs
        if lp is not None:
            listed = np.zeros(len(row_counts), dtype=bool)
            listed[np.frombuffer(lp.rows, dtype="<u4")] = True
            mask = np.repeat(listed, row_counts)
            values[mask] = np.frombuffer(lp.sampled, dtype="<f4")
            counts[mask] = np.frombuffer(lp.top_counts, dtype="<u4")
            top_ids.append(np.frombuffer(lp.top_ids, dtype="<u4"))
            top_lps.append(np.frombuffer(lp.top_logprobs, dtype="<f4"))
        has.append(mask)
        sampled.append(values)
        top_counts.append(counts)
    return _TokenLogprobs(
        np.concatenate(has),
        np.concatenate(sampled),
        np.concatenate(top_counts),
        np.concatenate(top_ids) if top_ids else np.empty(0, np.uint32),
        np.concatenate(top_lps) if top_lps else np.empty(0, np.float32),
    )
