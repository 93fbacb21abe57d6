"""The scheduler side's logprob columns: what `SchedulerClient.send_step(..., logprobs=...)` takes,
checked once, and split per worker with numpy (no Python per row).

A real scheduler's sampler gives, per generated token, the sampled token's logprob and the top-k
(id, logprob) pairs; `LogprobColumns` carries them for the rows of requests that asked, flattened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from detok import wire


class LogprobColumns(NamedTuple):
    """The logprobs of one `send_step`, for the rows of requests that asked (any array-likes).

    `rows`: indices into the step's rids, ascending. `sampled`: one float per token of those rows
    (their tokens in step order). `top_counts`: alternatives per such token (None: none); the
    alternatives follow in `top_ids` / `top_logprobs`, flattened, most likely first, at most
    `wire.MAX_TOP_LOGPROBS` per token."""

    rows: Sequence[int] | np.ndarray
    sampled: Sequence[float] | np.ndarray
    top_counts: Sequence[int] | np.ndarray | None = None
    top_ids: Sequence[int] | np.ndarray | None = None
    top_logprobs: Sequence[float] | np.ndarray | None = None


class LogprobArrays(NamedTuple):
    rows: np.ndarray  # int64
    sampled: np.ndarray  # float32
    top_counts: np.ndarray  # uint32
    top_ids: np.ndarray  # uint32
    top_logprobs: np.ndarray  # float32
    tokens_per_row: np.ndarray | None  # None: one token per row

    @classmethod
    def checked(cls, lp: LogprobColumns, n_rows: int, counts: np.ndarray | None) -> LogprobArrays:
        """Validated numpy forms; ValueError if the columns do not fit the step or each other."""
        rows = np.asarray(lp.rows, dtype=np.int64)
        if rows.ndim != 1 or (len(rows) and (rows[0] < 0 or rows[-1] >= n_rows or bool((np.diff(rows) <= 0).any()))):
            raise ValueError("logprob rows must be ascending indices into the step's rids")
        per_row = None if counts is None else counts[rows].astype(np.int64)
        n_tok = len(rows) if per_row is None else int(per_row.sum())
        sampled = np.asarray(lp.sampled, dtype=np.float32)
        if lp.top_counts is None:
            top_counts = np.zeros(n_tok, dtype=np.uint32)
        else:
            top_counts = np.asarray(lp.top_counts, dtype=np.uint32)
        top_ids = np.asarray([] if lp.top_ids is None else lp.top_ids, dtype=np.uint32)
        top_lps = np.asarray([] if lp.top_logprobs is None else lp.top_logprobs, dtype=np.float32)
        if sampled.shape != (n_tok,) or top_counts.shape != (n_tok,):
            raise ValueError(f"logprobs: {n_tok} tokens in the listed rows, {len(sampled)} sampled logprobs, {len(top_counts)} top counts")
        if n_tok and int(top_counts.max()) > wire.MAX_TOP_LOGPROBS:
            raise ValueError(f"at most {wire.MAX_TOP_LOGPROBS} alternatives per token")
        n_top = int(top_counts.sum(dtype=np.int64))
        if top_ids.shape != (n_top,) or top_lps.shape != (n_top,):
            raise ValueError(f"logprobs: top counts add up to {n_top}, got {len(top_ids)} ids and {len(top_lps)} logprobs")
        return cls(rows, sampled, top_counts, top_ids, top_lps, per_row)

    def shard(self, row_mask: np.ndarray) -> wire.StepLogprobs | None:
        """The columns of the rows in `row_mask` (one worker's share), rows renumbered."""
        keep = row_mask[self.rows]
        if not keep.any():
            return None
        if keep.all() and row_mask.all():
            return self.packed(self.rows)
        renumbered = (np.cumsum(row_mask) - 1)[self.rows[keep]]
        tmask = keep if self.tokens_per_row is None else np.repeat(keep, self.tokens_per_row)
        top_mask = np.repeat(tmask, self.top_counts)
        return wire.StepLogprobs(
            renumbered.astype("<u4").tobytes(),
            self.sampled[tmask].astype("<f4", copy=False).tobytes(),
            self.top_counts[tmask].astype("<u4", copy=False).tobytes(),
            self.top_ids[top_mask].astype("<u4", copy=False).tobytes(),
            self.top_logprobs[top_mask].astype("<f4", copy=False).tobytes(),
        )

    def packed(self, rows: np.ndarray) -> wire.StepLogprobs:
        return wire.StepLogprobs(
            rows.astype("<u4").tobytes(),
            self.sampled.astype("<f4", copy=False).tobytes(),
            self.top_counts.astype("<u4", copy=False).tobytes(),
            self.top_ids.astype("<u4", copy=False).tobytes(),
            self.top_logprobs.astype("<f4", copy=False).tobytes(),
        )
