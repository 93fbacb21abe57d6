"""The scheduler client's replay journal: what it rebuilds equals what was sent, whatever the
trimming and compaction did, and its memory stays bounded by what is still kept."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.scheduler import replay_journal
from detok.wire.packing import pack_rids, pack_u32, unpack_rids, unpack_u32
from detok.scheduler.replay_journal import Columns, ShardJournal


def _columns(rows: list[tuple[int, int, list[int]]]) -> Columns:
    counts = [len(t) for _, _, t in rows]
    return Columns(
        pack_rids([r for r, _, _ in rows]),
        pack_u32([s for _, s, _ in rows]),
        b"" if all(c == 1 for c in counts) else pack_u32(counts),
        pack_u32([i for _, _, t in rows for i in t]),
    )


def _rebuilt(columns: Columns) -> dict[int, tuple[int, list[int]]]:
    rids = unpack_rids(columns.rids).tolist()
    starts = unpack_u32(columns.starts).tolist()
    counts = unpack_u32(columns.counts).tolist() if columns.counts else [1] * len(rids)
    tokens = unpack_u32(columns.tokens).tolist()
    out: dict[int, tuple[int, list[int]]] = {}
    at = 0
    for rid, start, count in zip(rids, starts, counts):
        assert rid not in out, "one row per request"
        out[rid] = (start, tokens[at : at + count])
        at += count
    return out


class Kept:
    """The owner's side: which requests are kept, each with its first chunk."""

    def __init__(self, journal: ShardJournal) -> None:
        self.journal = journal
        self.first: dict[int, int] = {}

    def add(self, rid: int) -> None:
        self.first[rid] = self.journal.register(rid)

    def discard(self, rid: int) -> None:
        self.journal.release(self.first.pop(rid))

    def __contains__(self, rid: object) -> bool:
        return rid in self.first

    def __iter__(self):
        return iter(list(self.first))

    def trim(self) -> None:
        self.journal.trim(self, lambda: list(self.first))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), compact_rows=st.sampled_from([4, 32, 1 << 30]))
def test_columns_rebuild_exactly_what_kept_requests_were_sent(seed: int, compact_rows: int) -> None:
    rng = random.Random(seed)
    journal = ShardJournal()
    sent: dict[int, list[int]] = {}
    kept = Kept(journal)
    next_rid = rng.getrandbits(60)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay_journal, "COMPACT_MIN_ROWS", compact_rows)
        for _ in range(rng.randint(1, 80)):
            for _ in range(rng.randint(0, 3)):  # new requests join
                rid = next_rid = next_rid + rng.randint(1, 2**40)
                kept.add(rid)
                sent[rid] = []
            for rid in [r for r in kept if rng.random() < 0.1]:  # some are forgotten
                kept.discard(rid)
            live = [r for r in kept if rng.random() < 0.9]
            rows = []
            for rid in live:
                ids = [rng.randrange(2**32) for _ in range(rng.choice([1, 1, 1, 2, 5]))]
                rows.append((rid, len(sent[rid]), ids))
                sent[rid] += ids
            if rows:
                journal.append(_columns(rows))
            kept.trim()
        rebuilt = _rebuilt(journal.columns(kept))
    assert set(rebuilt) == {r for r in kept if sent[r]}
    for rid, (start, ids) in rebuilt.items():
        assert start == 0 and ids == sent[rid]


def test_chunks_no_kept_request_can_be_in_are_dropped_whole() -> None:
    journal = ShardJournal()
    kept = Kept(journal)
    kept.add(1)
    journal.append(_columns([(1, 0, [5])]))
    kept.add(2)
    for i in range(1, 100):
        journal.append(_columns([(1, i, [5]), (2, i - 1, [6])]))
        kept.trim()
    assert journal.chunks == 100 and journal.compactions == 0  # rid 1 started in the first chunk
    kept.discard(1)
    kept.trim()
    assert journal.chunks == 99  # rid 2 started in the second
    kept.discard(2)
    kept.trim()
    assert journal.chunks == 0 and journal.nbytes == 0


def test_alike_requests_are_never_compacted(monkeypatch) -> None:
    """Requests of one length, starting and ending every step: the journal holds only what they
    need, and compaction (which would read it all for nothing) never runs."""
    monkeypatch.setattr(replay_journal, "COMPACT_MIN_ROWS", 64)
    journal = ShardJournal()
    kept = Kept(journal)
    live: list[tuple[int, int]] = []  # (rid, tokens sent)
    for step in range(3000):
        kept.add(100_000 + step)
        live.append((100_000 + step, 0))
        journal.append(_columns([(rid, n, [n]) for rid, n in live]))
        live = [(rid, n + 1) for rid, n in live if n + 1 < 50]
        for rid in list(kept):
            if rid not in {r for r, _ in live}:
                kept.discard(rid)
        kept.trim()
    assert journal.compactions == 0 and journal.chunks <= 51


def test_a_long_request_among_short_ones_is_compacted_to_4_bytes_per_token(monkeypatch) -> None:
    monkeypatch.setattr(replay_journal, "COMPACT_MIN_ROWS", 1024)
    journal = ShardJournal()
    kept = Kept(journal)
    kept.add(7)  # one long request holds the low water back...
    rid = 1000
    for step in range(5000):
        rid += 1
        kept.add(rid)  # ...while three short ones come and go every step
        journal.append(_columns([(7, step, [step]), (rid, 0, [1]), (rid + 10**6, 0, [2]), (rid + 2 * 10**6, 0, [3])]))
        kept.discard(rid)
        kept.trim()
    assert journal.compactions > 0
    assert journal.nbytes <= 16 * 4 * (2 * 5000 + 1024)  # bounded by the compaction rule...
    rebuilt = _rebuilt(journal.columns(kept))
    assert rebuilt == {7: (0, list(range(5000)))}
    assert len(journal.columns(kept).tokens) == 4 * 5000  # ...and 4 bytes per id once grouped


def test_membership_by_hash_agrees_with_isin_with_colliding_buckets() -> None:
    rng = np.random.default_rng(3)
    wanted = rng.integers(0, 2**63, 5000, dtype=np.uint64)
    rows = np.concatenate([wanted[rng.integers(0, 5000, 20000)], rng.integers(0, 2**63, 20000, dtype=np.uint64)])
    hit, where = replay_journal._member(rows, wanted)
    assert (hit == np.isin(rows, wanted)).all()
    assert (wanted[where[hit]] == rows[hit]).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_logprob_columns_follow_their_tokens_when_rows_are_regrouped(seed: int) -> None:
    from detok.wire.to_workers import StepLogprobs

    rng = random.Random(seed)
    journal = ShardJournal()
    kept = Kept(journal)
    wants = {rid: rng.choice([None, 0, 2]) for rid in range(1, 9)}
    for rid in wants:
        kept.add(rid)
    sent: dict[int, list[tuple[int, float, tuple]]] = {rid: [] for rid in wants}
    for _ in range(rng.randint(1, 30)):
        rows, lp_rows, sampled, top_counts, top_ids, top_lps = [], [], [], [], [], []
        for rid in [r for r in wants if rng.random() < 0.7]:
            n = rng.choice([1, 1, 3])
            ids = [rng.randrange(1000) for _ in range(n)]
            if wants[rid] is not None:
                lp_rows.append(len(rows))
                for t in ids:
                    k = rng.randint(0, wants[rid])
                    alts = tuple((rng.randrange(1000), -rng.random()) for _ in range(k))
                    lp = -rng.random()
                    sampled.append(lp), top_counts.append(k)
                    top_ids.extend(a for a, _ in alts), top_lps.extend(b for _, b in alts)
                    sent[rid].append((t, lp, alts))
            else:
                sent[rid] += [(t, None, ()) for t in ids]
            rows.append((rid, len(sent[rid]) - n, ids))
        if not rows:
            continue
        columns = _columns(rows)
        lp = StepLogprobs(pack_u32(lp_rows), np.array(sampled, "<f4").tobytes(), pack_u32(top_counts),
                          pack_u32(top_ids), np.array(top_lps, "<f4").tobytes()) if lp_rows else None
        journal.append(columns._replace(logprobs=lp))
        kept.trim()
    out = journal.columns(kept)
    rebuilt = _rebuilt(out)
    listed = set(unpack_u32(out.logprobs.rows).tolist()) if out.logprobs is not None else set()
    order = unpack_rids(out.rids).tolist()
    at = top_at = 0
    lps = np.frombuffer(out.logprobs.sampled, "<f4") if out.logprobs is not None else []
    tcs = unpack_u32(out.logprobs.top_counts).tolist() if out.logprobs is not None else []
    tids = unpack_u32(out.logprobs.top_ids).tolist() if out.logprobs is not None else []
    tlps = np.frombuffer(out.logprobs.top_logprobs, "<f4") if out.logprobs is not None else []
    for row, rid in enumerate(order):
        assert rebuilt[rid][1] == [t for t, _, _ in sent[rid]]
        assert (row in listed) == (wants[rid] is not None)
        if row not in listed:
            continue
        for t, lp, alts in sent[rid]:
            assert np.isclose(lps[at], lp) and tcs[at] == len(alts)
            assert tids[top_at : top_at + len(alts)] == [a for a, _ in alts]
            assert np.allclose(tlps[top_at : top_at + len(alts)], [b for _, b in alts])
            at, top_at = at + 1, top_at + len(alts)
    assert at == len(lps) and top_at == len(tids)
