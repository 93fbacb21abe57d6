"""Helpers for the logprob tests: batches with logprob columns (the stub's deterministic numbers),
and a collector of what a WorkerCore sends, entry by entry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detok.wire.packing import pack_rids, pack_u32
from detok.wire.to_workers import DetokBatch, EndRequest, Registration, StepLogprobs
from detok.scheduler.step_logprobs import LogprobArrays, LogprobColumns
from detok.receiver.token_logprobs import TokenLogprobs, split_logprobs, token_bytes
from detok.worker.core import Outputs
from scheduler_stub.logprobs import token_logprobs


def step_logprobs(
    rids: list[int], starts: list[int], tokens: list[int], counts: list[int] | None, sent_k: dict[int, int], vocab: int,
    seeds: dict[int, int] | None = None,
) -> StepLogprobs | None:
    """Logprob columns for the rows whose rid is in `sent_k` (rid -> alternatives the scheduler
    sends), numbers from the stub's `token_logprobs(seed=rid, position, id, k)` (`seeds`: another
    rid's numbers for a rid)."""
    per_row = counts or [1] * len(rids)
    rows, sampled, top_counts, top_ids, top_lps = [], [], [], [], []
    t = 0
    for row, (rid, start, count) in enumerate(zip(rids, starts, per_row)):
        if rid in sent_k:
            rows.append(row)
            for j in range(count):
                lp, ids, lps = token_logprobs((seeds or {}).get(rid, rid), start + j, tokens[t + j], sent_k[rid], vocab)
                sampled.append(lp), top_counts.append(len(ids)), top_ids.extend(ids), top_lps.extend(lps)
        t += count
    if not rows:
        return None
    cnt = None if counts is None else np.asarray(counts, dtype=np.uint32)
    arrays = LogprobArrays.checked(LogprobColumns(rows, sampled, top_counts, top_ids, top_lps), len(rids), cnt)
    return arrays.packed(arrays.rows)


def lp_batch(
    rids: list[int],
    starts: list[int],
    tokens: list[int],
    counts: list[int] | None = None,
    *,
    sent_k: dict[int, int] | None = None,
    vocab: int = 0,
    new: list[Registration] | None = None,
    ends: list[EndRequest] | None = None,
    seeds: dict[int, int] | None = None,
) -> DetokBatch:
    lp = step_logprobs(rids, starts, tokens, counts, sent_k or {}, vocab, seeds) if sent_k else None
    return DetokBatch(
        0, 0.0, new or [], pack_rids(rids), pack_u32(starts), pack_u32(counts) if counts is not None else b"",
        pack_u32(tokens), ends or [], lp,
    )


@dataclass
class Entry:
    token_id: int
    token: str
    logprob: float
    top: list[tuple[int, str, float]]

    @property
    def data(self) -> bytes:
        return token_bytes(self.token)


class EntryCollector:
    """What a core sends: text per rid, and every logprob entry by (rid, token index). `runs`
    keeps the raw runs (for replay checks); a second entry for a token index must be identical."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}
        self.entries: dict[int, dict[int, Entry]] = {}
        self.runs: list[tuple[str, int, TokenLogprobs]] = []
        self.finish: dict[int, object] = {}

    def take(self, out: Outputs) -> Outputs:
        for reply_to, batch in out.deltas:
            for rid, text, _ in batch.rows():
                if text:
                    self.text[rid] = self.text.get(rid, "") + text
            if batch.logprobs is not None:
                for rid, run, _, _ in split_logprobs(batch.logprobs):
                    self.runs.append((reply_to, rid, run))
                    got = self.entries.setdefault(rid, {})
                    j = 0
                    for i, (tid, tok, lp, count) in enumerate(zip(run.token_ids, run.tokens, run.logprobs, run.top_counts)):
                        top = list(zip(run.top_ids[j : j + count], run.top_tokens[j : j + count], run.top_logprobs[j : j + count]))
                        j += count
                        entry = Entry(tid, tok, lp, top)
                        assert got.setdefault(run.first + i, entry) == entry, "a replayed entry must be identical"
            for done in batch.finished:
                assert done.rid not in self.finish
                self.finish[done.rid] = done.finish
        return out

    def ordered(self, rid: int) -> list[Entry]:
        got = self.entries.get(rid, {})
        assert sorted(got) == list(range(len(got))), f"entries of rid {rid} are not tokens 0..n-1: {sorted(got)}"
        return [got[i] for i in range(len(got))]
