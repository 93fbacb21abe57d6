"""Checks of an incoming DetokBatch, before any state changes: a batch whose columns do not fit
together is rejected whole (counted as malformed by the process loop, never a crash)."""

from __future__ import annotations

import numpy as np

from detok.wire.to_workers import DetokBatch
from detok.worker import logprobs as lp_entries


class MalformedBatch(ValueError):
    """A batch whose columns do not fit together; rejected whole, before any state changes."""


def check_batch(batch: DetokBatch) -> None:
    """MalformedBatch unless the batch's columns (and logprob columns) fit together."""
    _check_columns(batch)
    if batch.logprobs is not None:
        _check_logprobs(batch)


def _check_columns(batch: DetokBatch) -> None:
    """MalformedBatch unless the batch's packed columns fit together (checked before any state
    changes; the table checks again as it steps)."""
    n, rem = divmod(len(batch.rids), 8)
    if rem or len(batch.starts) != 4 * n or len(batch.tokens) % 4:
        raise MalformedBatch(
            f"packed columns of {len(batch.rids)} (rids), {len(batch.starts)} (starts) and {len(batch.tokens)} (tokens) bytes"
        )
    n_tokens = len(batch.tokens) // 4
    if not batch.counts:
        if n_tokens != n:
            raise MalformedBatch(f"{n} rids with one token each but {n_tokens} tokens")
        return
    if len(batch.counts) != 4 * n:
        raise MalformedBatch(f"{len(batch.counts)} bytes of counts for {n} rids")
    total = int(np.frombuffer(batch.counts, dtype="<u4").sum(dtype=np.int64))
    if total != n_tokens:
        raise MalformedBatch(f"counts add up to {total} but there are {n_tokens} tokens")


def _check_logprobs(batch: DetokBatch) -> None:
    problem = lp_entries.check_step_logprobs(batch.logprobs, len(batch.rids) // 8, batch.counts)  # type: ignore[arg-type]
    if problem is not None:
        raise MalformedBatch(problem)
