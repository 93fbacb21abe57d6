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
from collections.abc import Callable, Container, Iterable
from typing import Final, NamedTuple

import numpy as np

COMPACT_MIN_ROWS: Final = 1 << 20  # per worker: a journal of fewer rows is never compacted

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class Columns(NamedTuple):
    """A step's packed columns, as `DetokBatch` carries them (`counts` empty: one id per row)."""

    rids: bytes  # uint64 per row
    starts: bytes  # uint32 per row
    counts: bytes  # uint32 per row, or b""
    tokens: bytes  # uint32 ids, flattened

    @property
    def nbytes(self) -> int:
        return len(self.rids) + len(self.starts) + len(self.counts) + len(self.tokens)


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

    def trim(self, kept: Container[int], kept_rids: Callable[[], Iterable[int]]) -> None:
        """Drop the chunks no kept request can be in; compact when most rows are garbage.
        `kept` answers membership; `kept_rids()` lists the kept requests (called to compact)."""
        firsts = self._firsts
        while firsts and firsts[0][1] not in kept:
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

    def _compact(self, keep: Iterable[int]) -> None:
        last = self._chunks[-1][0]
        merged = _group(self._chunks, np.fromiter(keep, dtype=np.uint64))
        self._chunks.clear()
        self._chunks.append((last, merged))  # numbered as the newest chunk it replaced
        self._bytes = merged.nbytes
        self._rows = len(merged.rids) // 8
        self.compactions += 1

    def columns(self, keep: Iterable[int]) -> Columns:
        """Every row sent for the requests in `keep`, one row per request (its ids in order)."""
        wanted = np.fromiter(keep, dtype=np.uint64)
        if not len(wanted) or not self._chunks:
            return EMPTY
        return _group(self._chunks, wanted)


def _member(rids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows whose rid is wanted, index of that rid in `wanted`) by a hash table, a few ns per
    row (numpy's sort-based isin and an unsorted searchsorted cost ~100 ns per row here)."""
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


def _group(chunks: Iterable[tuple[int, Columns]], wanted: np.ndarray) -> Columns:
    """The rows of `wanted` rids, grouped by rid (in `wanted`'s order), contiguous runs merged."""
    parts = [c for _, c in chunks]
    rids = np.frombuffer(b"".join(c.rids for c in parts), dtype="<u8")
    starts = np.frombuffer(b"".join(c.starts for c in parts), dtype="<u4").astype(np.int64)
    counts = np.concatenate(
        [np.frombuffer(c.counts, dtype="<u4") if c.counts else np.ones(len(c.rids) // 8, dtype="<u4") for c in parts]
    ).astype(np.int64) if parts else np.empty(0, np.int64)
    tokens = np.frombuffer(b"".join(c.tokens for c in parts), dtype="<u4")
    hit, where = _member(rids, wanted)
    rows = np.flatnonzero(hit)
    key = where[rows].astype(np.uint16 if len(wanted) <= 1 << 16 else np.uint32)  # radix-sorted when 16-bit
    rows = rows[np.argsort(key, kind="stable")]  # by request, each in sending order
    firsts = (np.cumsum(counts) - counts)[rows]
    n = counts[rows]
    # the ids of the selected rows, in that order
    take = np.repeat(firsts - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
    out_tokens = tokens[take]
    # merge each request's consecutive rows (next start == previous start + count) into one
    r, s = rids[rows], starts[rows]
    joins = (r[1:] == r[:-1]) & (s[1:] == s[:-1] + n[:-1])
    heads = np.flatnonzero(np.concatenate([[True], ~joins])) if len(rows) else np.empty(0, np.intp)
    merged_counts = np.add.reduceat(n, heads) if len(heads) else np.empty(0, np.int64)
    return Columns(
        r[heads].astype("<u8").tobytes(),
        s[heads].astype("<u4").tobytes(),
        merged_counts.astype("<u4").tobytes(),
        out_tokens.astype("<u4", copy=False).tobytes(),
    )
