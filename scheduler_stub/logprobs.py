"""The stub's "sampler" logprobs: deterministic, plausible numbers for requests that ask.

Per token, a function of the request's seed, the token's position and the sampled id: the top-k
alternatives sorted most likely first (logprobs <= 0, gaps of 0.25-2.25 nats), the sampled id
among them (rank 0 three times in four, else 1-3), the other ids spread over the vocabulary. The
same request therefore gets the same logprobs streamed or not, in whatever batch it lands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from detok.wire.to_workers import MAX_TOP_LOGPROBS
from detok.scheduler.step_logprobs import LogprobColumns

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit hash of x."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def token_logprobs(seed: int, position: int, sampled: int, k: int, vocab_size: int) -> tuple[float, list[int], list[float]]:
    """(sampled logprob, top ids, top logprobs) of one token; `k` alternatives (capped)."""
    k = max(0, min(k, MAX_TOP_LOGPROBS, vocab_size))
    h = _mix(((seed & _MASK) * 0x100000001B3 + position) & _MASK)
    rank = 0 if h & 3 else 1 + (h >> 2) % 3
    levels = [-((h >> 8) % 1000) / 2000.0]
    for j in range(1, max(k, rank + 1)):
        levels.append(levels[-1] - 0.25 - (_mix(h + j) % 2000) / 1000.0)
    if k:
        rank = min(rank, k - 1)
    ids: list[int] = []
    used = {sampled}
    for j in range(k):
        if j == rank:
            ids.append(sampled)
            continue
        candidate = _mix(h ^ (j + 1)) % vocab_size
        while candidate in used:
            candidate = (candidate + 1) % vocab_size
        used.add(candidate)
        ids.append(candidate)
    return levels[rank], ids, levels[:k]


def step_logprobs(
    rids: Sequence[int],
    starts: Sequence[int],
    counts: Sequence[int],
    tokens: Sequence[int],
    wishes: Mapping[int, tuple[int, int]],
    vocab_size: int,
) -> LogprobColumns | None:
    """The logprob columns of one step for the rows whose rid is in `wishes` (rid -> (seed, k))."""
    rows: list[int] = []
    sampled: list[float] = []
    top_counts: list[int] = []
    top_ids: list[int] = []
    top_lps: list[float] = []
    t = 0
    for row, (rid, start, count) in enumerate(zip(rids, starts, counts)):
        wish = wishes.get(rid)
        if wish is not None:
            rows.append(row)
            seed, k = wish
            for j in range(count):
                lp, ids, lps = token_logprobs(seed, start + j, tokens[t + j], k, vocab_size)
                sampled.append(lp)
                top_counts.append(len(ids))
                top_ids.extend(ids)
                top_lps.extend(lps)
        t += count
    if not rows:
        return None
    return LogprobColumns(rows, sampled, top_counts, top_ids, top_lps)
