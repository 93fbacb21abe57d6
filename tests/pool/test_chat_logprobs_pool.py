"""Chat logprobs rendered by the workers (`logprobs_form="chat"`) with real processes and sockets:
requests of both forms sharded over two workers, one of them SIGKILLed mid-stream; the worker
that takes its place gets them replayed, and every request's logprobs object is the one the
frontend's own writer makes of the scheduler's numbers - nothing lost, nothing twice."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from detok.streaming.chat_logprobs_json import chat_logprobs_json, joined_chat_logprobs
from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver
from detok.receiver.token_logprobs import RawToken, TokenLogprobs
from detok.scheduler.step_logprobs import LogprobColumns
from detok.tokenizer.factory import load_tokenizer
from detok.wire.to_workers import Registration
from detok.worker.logprobs import TokenStrings
from scheduler_stub.logprobs import token_logprobs
from tests.helpers.pool_helpers import reference, workload
from tests.helpers.tokenizers_available import hf_qwen2_dir
from tests.helpers.waiting import wait_until
from tests.pool.test_logprobs_pool import collect

pytestmark = pytest.mark.timeout(180)
SENT = 5  # alternatives the scheduler sends per token


def expected_object(tok, strings: TokenStrings, rid: int, ids: list[int], k: int) -> bytes:
    """The frontend writer's object for the scheduler's numbers (the entries form, as the wire
    carries it: float32, the alternatives cut at k)."""
    def token(i: int) -> str:
        text, raw = strings.string(i)
        return RawToken.parse(text) if raw else text

    lps, counts, alt_ids, alt_lps = [], [], [], []
    for pos, t in enumerate(ids):
        lp, alt, alt_lp = token_logprobs(rid, pos, t, SENT, tok.vocab_size)
        lps.append(lp), counts.append(min(len(alt), k)), alt_ids.extend(alt[:k]), alt_lps.extend(alt_lp[:k])
    f32 = lambda v: np.asarray(v, np.float32).astype(np.float64).tolist()  # noqa: E731
    entries = TokenLogprobs(0, ids, [token(i) for i in ids], f32(lps), counts, alt_ids, [token(i) for i in alt_ids],
                            f32(alt_lps))
    return bytes(chat_logprobs_json(entries, k))


def test_chat_items_survive_a_killed_worker() -> None:
    source = str(hf_qwen2_dir())
    tok = load_tokenizer(source)
    strings = TokenStrings.of(tok)
    requests = workload(tok, 16, 24, seed=5, first_rid=40_000)
    form = {r.rid: "chat" if i % 3 else "entries" for i, r in enumerate(requests)}
    k = {r.rid: i % 4 for i, r in enumerate(requests)}
    with DetokPool(source, workers=2, spare=False) as pool:
        assert pool.wait_ready(60)
        client = pool.client()
        rx = DeltaReceiver()
        by_rid = {r.rid: r for r in requests}
        pos = {r.rid: 0 for r in requests}
        steps = [0]

        def step() -> None:
            if not pos:  # every id sent: the scheduler still polls (a restarted worker may yet ask for its replay)
                client.poll()
                return
            steps[0] += 1
            if steps[0] == 6:  # mid-stream: the worker of most requests dies, its slot restarts
                restarts, victim = pool.restarts, pool.pids()[1]
                os.kill(victim, signal.SIGKILL)
                wait_until(lambda: pool.restarts == restarts + 1 and pool.pids()[1] not in (None, victim), 60, 0.02,
                           "the killed worker's restart")
            rids, starts, counts, tokens, ends = [], [], [], [], []
            rows, sampled, top_counts, top_ids, top_lps = [], [], [], [], []
            for rid, p in list(pos.items()):
                ids = by_rid[rid].tokens[p : p + 1 + (rid + steps[0]) % 3]
                rows.append(len(rids))
                for j, t in enumerate(ids):
                    lp, alt, alt_lps = token_logprobs(rid, p + j, t, SENT, tok.vocab_size)
                    sampled.append(lp), top_counts.append(len(alt)), top_ids.extend(alt), top_lps.extend(alt_lps)
                rids.append(rid), starts.append(p), counts.append(len(ids)), tokens.extend(ids)
                pos[rid] = p + len(ids)
                if pos[rid] == len(by_rid[rid].tokens):
                    ends.append((rid, "length"))
                    del pos[rid]
            client.send_step(rids, tokens, counts, starts=starts, ends=ends,
                             logprobs=LogprobColumns(rows, sampled, top_counts, top_ids, top_lps))
            client.poll()

        try:
            for r in requests:
                client.add_request(Registration(r.rid, rx.endpoint, r.context, r.params, logprobs=k[r.rid],
                                                logprobs_form=form[r.rid]))  # type: ignore[arg-type]
            out = collect(rx, list(by_rid), step, timeout=120, describe=lambda: (
                f"restarts {pool.restarts}, pids {pool.pids()}, steps {steps[0]}, replays sent {client.replays_sent}, "
                f"workers {client.worker_states()}, events {list(client.events)[-5:]}"))
        finally:
            client.close()
            rx.close()
    assert steps[0] > 6
    for r in requests:
        got = out[r.rid]
        assert (got["text"], got["finish"]) == reference(tok, r)
        runs = got["runs"]
        assert [i for run in runs for i in run.token_ids] == r.tokens  # every token once, in order
        assert all((run.items is not None) == (form[r.rid] == "chat") for run in runs)
        body = bytes(joined_chat_logprobs([chat_logprobs_json(run, k[r.rid]) for run in runs]))
        assert body == expected_object(tok, strings, r.rid, r.tokens, k[r.rid])
