"""Logprobs end to end with real processes and sockets: SchedulerClient (columns sharded over
three workers) -> worker processes (token strings) -> DeltaReceiver (entries on RequestDelta), and
the scheduler stub producing its deterministic logprobs for GenerateRequest.logprobs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import numpy as np
import pytest

from detok.pool.pool import DetokPool
from detok.wire.to_scheduler import GenerateRequest
from detok.wire.to_workers import Registration
from detok.receiver.receiver import DeltaReceiver
from detok.scheduler.step_logprobs import LogprobArrays, LogprobColumns
from detok.wire.params import DecodeParams
from detok.tokenizer.factory import load_tokenizer
from detok.worker.logprobs import TokenStrings
from scheduler_stub.generation import RequestGeneration
from scheduler_stub.logprobs import token_logprobs
from scheduler_stub.stub import SchedulerStub, StepPolicy
from scheduler_stub.workload import CorpusWorkload, embedded_corpus_text
from tests.helpers.pool_helpers import reference, workload
from tests.helpers.tokenizers_available import hf_gpt2_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stack():
    """Three workers (the client shards over them) and the same tokenizer in this process."""
    source = str(hf_gpt2_dir())
    with DetokPool(source, workers=3, spare=False) as pool:
        yield load_tokenizer(source), pool


def collect(rx: DeltaReceiver, rids: list[int], pump, timeout: float = 30.0,
            describe: Callable[[], str] = str) -> dict[int, dict]:
    """Every request's text, logprob runs and finish; `describe`: the sending side's state, told
    with the unfinished requests when they miss the deadline."""
    streams = {r: rx.open(r) for r in rids}
    out = {r: {"text": "", "runs": [], "finish": None, "num_tokens": None} for r in rids}
    deadline = time.monotonic() + timeout
    while any(v["finish"] is None for v in out.values()):
        if time.monotonic() >= deadline:
            unfinished = {r: (len(v["text"]), sum(len(run.token_ids) for run in v["runs"]))
                          for r, v in out.items() if v["finish"] is None}
            raise AssertionError(f"requests never finished; rid: (chars, logprob entries) {unfinished}; {describe()}")
        pump()
        rx.poll_blocking(0.02)
        for r, s in streams.items():
            while (d := s.take()) is not None:
                out[r]["text"] += d.text
                if d.logprobs is not None:
                    out[r]["runs"].append(d.logprobs)
                if d.finish is not None:
                    out[r]["finish"], out[r]["num_tokens"] = d.finish, d.num_tokens
    return out


def flat(runs) -> list[tuple[int, str, float, list[int]]]:
    """(id, token, logprob, alternative ids) per entry, checking the runs follow each other."""
    got, pos = [], 0
    for run in runs:
        assert run.first == pos
        j = 0
        for tid, t, lp, c in zip(run.token_ids, run.tokens, run.logprobs, run.top_counts):
            got.append((tid, str(t), lp, run.top_ids[j : j + c]))
            j += c
        pos = run.end
    return got


def test_client_columns_through_three_workers_to_the_receiver(stack) -> None:
    """Requests with and without logprobs, one to three tokens per row, sharded over three
    workers: every token of a request that asked has its entry (string made in a worker), in
    order, once; the others carry none; the text is unchanged."""
    tok, pool = stack
    reqs = workload(tok, 24, 40, seed=3)
    wants = {r.rid: (None if r.rid % 3 == 0 else r.rid % 6) for r in reqs}  # k in 1..5 or None
    strings = TokenStrings.of(tok)
    client = pool.client()
    rx = DeltaReceiver()
    rng = random.Random(0)
    try:
        for r in reqs:
            client.add_request(Registration(r.rid, rx.endpoint, r.context, r.params, logprobs=wants[r.rid]))
        pos = {r.rid: 0 for r in reqs}
        by_rid = {r.rid: r for r in reqs}

        def step() -> None:
            if not pos:
                return
            rids, starts, counts, tokens, ends = [], [], [], [], []
            rows, sampled, top_counts, top_ids, top_lps = [], [], [], [], []
            for rid, p in list(pos.items()):
                n = min(rng.randint(1, 3), len(by_rid[rid].tokens) - p)
                ids = by_rid[rid].tokens[p : p + n]
                if wants[rid] is not None:
                    rows.append(len(rids))
                    for j, t in enumerate(ids):
                        lp, alt, alt_lps = token_logprobs(rid, p + j, t, 5, tok.vocab_size)  # always 5 sent
                        sampled.append(lp), top_counts.append(len(alt)), top_ids.extend(alt), top_lps.extend(alt_lps)
                rids.append(rid), starts.append(p), counts.append(n), tokens.extend(ids)
                pos[rid] = p + n
                if pos[rid] == len(by_rid[rid].tokens):
                    ends.append((rid, "length"))
                    del pos[rid]
            columns = LogprobColumns(rows, sampled, top_counts, top_ids, top_lps)
            assert client.send_step(rids, tokens, counts, starts=starts, ends=ends, logprobs=columns) == []

        out = collect(rx, [r.rid for r in reqs], step)
    finally:
        client.close()
        rx.close()
    for r in reqs:
        got = out[r.rid]
        assert (got["text"], got["finish"]) == reference(tok, r)
        k = wants[r.rid]
        if k is None:
            assert got["runs"] == []
            continue
        entries = flat(got["runs"])
        assert [e[0] for e in entries] == r.tokens
        for pos_, (tid, text, lp, alt) in enumerate(entries):
            want_lp, want_alt, _ = token_logprobs(r.rid, pos_, tid, 5, tok.vocab_size)
            assert text == strings.string(tid)[0] and lp == pytest.approx(want_lp) and alt == want_alt[:k]


def test_sharding_keeps_each_workers_columns_consistent() -> None:
    """The client's per-worker split (vectorised): rows renumbered, tokens and alternatives cut
    at the same places, with several tokens per row."""
    counts = np.array([2, 1, 3, 1], dtype=np.uint32)
    cols = LogprobColumns([0, 2, 3], [-1, -2, -3, -4, -5, -6], [1, 0, 2, 1, 0, 3],
                          [10, 30, 31, 40, 60, 61, 62], [-.1, -.3, -.31, -.4, -.6, -.61, -.62])
    arrays = LogprobArrays.checked(cols, 4, counts)
    part = arrays.shard(np.array([False, True, True, False]))  # rows 1 and 2 of the step
    assert np.frombuffer(part.rows, "<u4").tolist() == [1]  # row 2 is the shard's second row
    assert np.frombuffer(part.sampled, "<f4").tolist() == [-3, -4, -5]
    assert np.frombuffer(part.top_counts, "<u4").tolist() == [2, 1, 0]
    assert np.frombuffer(part.top_ids, "<u4").tolist() == [30, 31, 40]
    assert np.frombuffer(part.top_logprobs, "<f4").tolist() == pytest.approx([-.3, -.31, -.4])
    assert arrays.shard(np.array([False, True, False, False])) is None
    for bad in (LogprobColumns([3, 0], [0.0] * 2), LogprobColumns([0], [0.0]), LogprobColumns([0], [0, 0], [21, 0], [1] * 21, [0] * 21),
                LogprobColumns([1], [0.0], [1], [], [])):
        with pytest.raises(ValueError):
            LogprobArrays.checked(bad, 4, counts)


def test_stub_scheduler_sends_its_logprobs_for_requests_that_ask(stack) -> None:
    """GenerateRequest.logprobs -> Registration -> the stub's deterministic numbers -> entries for
    every output token, EOS included; requests that do not ask get none and cost nothing."""
    tok, pool = stack
    wl = CorpusWorkload(tok, embedded_corpus_text())
    client = pool.client()
    rx = DeltaReceiver()
    stub = SchedulerStub(client, wl, tok.eos_token_ids, StepPolicy(0.0, 64, 2))
    requests = [GenerateRequest(rid, [rid, 7], DecodeParams(), 300 if rid < 4 else 12, rx.endpoint, rid,
                                logprobs=[2, None, 0, 5, None, 20][rid]) for rid in range(6)]
    try:
        for request in requests:
            stub.submit(request)
        out = collect(rx, [r.rid for r in requests], lambda: stub.step() if not stub.idle else None)
    finally:
        client.close()
        rx.close()
    eos = min(tok.eos_token_ids)
    for request in requests:
        got = out[request.rid]
        gen = RequestGeneration(request, wl, tok.eos_token_ids)
        ids = []
        while (step := gen.next_tokens(1))[1] is None:
            ids += step[0]
        ids += step[0]
        assert got["num_tokens"] == len(ids)
        if request.logprobs is None:
            assert got["runs"] == []
            continue
        entries = flat(got["runs"])
        assert [e[0] for e in entries] == ids
        assert all(len(e[3]) == request.logprobs for e in entries)
        assert all(e[3] == token_logprobs(request.seed, p, e[0], request.logprobs, tok.vocab_size)[1] for p, e in enumerate(entries))
        if got["finish"].reason == "stop":
            assert entries[-1][0] == eos and entries[-1][1] == "<|endoftext|>"  # the hidden EOS has its entry
    assert any(out[r.rid]["finish"].reason == "stop" for r in requests if r.logprobs is not None)
