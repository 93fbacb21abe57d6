"""The engine driving a real detok pool (worker processes, zmq) with the real model: what detok
streams is the decode of what the engine generated, stop strings and aborts stop and free
sequences, sampling and logprobs are the model's, and the bounds hold."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from detok.pool.pool import DetokPool
from reference_engine.limits import EngineLimits
from reference_engine.model import Segment
from reference_engine.sampling import log_softmax
from tests.reference_engine.conftest import chat_ids, needs_model
from tests.reference_engine.rig import EngineRig

pytestmark = [pytest.mark.timeout(300), needs_model]

FRANCE = [504, 3575, 282, 4649, 314, 7042, 30, 2]  # greedy "The capital of France is Paris." + <|im_end|>


@pytest.fixture(scope="module")
def pool(model_path):  # type: ignore[no-untyped-def]
    with DetokPool(model_path, workers=2, spare=False) as p:
        yield p


@pytest.fixture
def rig(pool, model_parts):  # type: ignore[no-untyped-def]
    r = EngineRig(pool, *model_parts)
    yield r
    r.close()


def test_streamed_text_is_the_decode_of_the_generated_ids(rig, tok):
    prompts = [chat_ids(tok, "What is the capital of France?"), chat_ids(tok, "Write a haiku about the sea."),
               tok.encode("Once upon a time", add_special_tokens=False), chat_ids(tok, "Name three colours.")]
    rids = [rig.submit(rig.request(p, max_tokens=10, temperature=0.0 if i % 2 == 0 else 0.8, seed=i))
            for i, p in enumerate(prompts)]
    rig.run_all(rids)
    for rid in rids:
        ids, reason = rig.engine.finished_log[rid]
        assert rig.text(rid) == tok.decode(ids, skip_special_tokens=True)
        assert rig.finishes[rid].reason == reason
    assert rig.engine.finished_log[rids[0]] == (FRANCE, "stop")  # greedy in a batch of four
    assert rig.engine.caches == 0 and rig.engine.kv_tokens == 0


def test_a_stop_string_stops_the_engine_within_a_step(rig, tok):
    rid = rig.submit(rig.request(chat_ids(tok, "What is the capital of France?"), max_tokens=40, stop=[" France"],
                                 ignore_eos=True))
    rig.run_lockstep(rid)
    assert rig.finishes[rid].reason == "stop" and rig.finishes[rid].matched == " France"
    assert rig.text(rid) == "The capital of"
    ids, reason = rig.engine.finished_log[rid]
    assert reason == "stopped by detok" and rig.engine.stats.stopped_by_workers == 1
    assert ids[:4] == FRANCE[:4]
    # " France" is token 4; the worker's notice leaves right after its deltas: the engine makes at
    # most the step in flight more (two if the notice is microseconds late for the next poll)
    assert len(ids) <= 4 + 2


def test_an_abort_frees_the_sequence(rig, tok):
    rid = rig.submit(rig.request(chat_ids(tok, "Tell me a long story."), max_tokens=500, ignore_eos=True))
    waiting = rig.submit(rig.request(chat_ids(tok, "Hi"), max_tokens=500))
    rig.run_until(lambda: rig.engine.kv_tokens > 0 and rid in rig.engine.running)
    rig.abort(rid)
    rig.abort(waiting)
    rig.run_until(lambda: rig.engine.idle)
    assert rig.engine.caches == 0 and rig.engine.kv_tokens == 0 and not rig.engine.running
    assert rig.engine.stats.aborted == 2
    assert rig.client.live_rids() == []  # the workers were told: nothing is left registered


def test_an_abort_range_frees_a_dead_frontends_sequences_only(rig, tok):
    """A frontend died: its sequences (running and waiting) are freed and the workers told, in one
    AbortRange; a sequence outside its rid range goes on to its end; a late request of the range
    is refused."""
    from detok.wire.to_scheduler import AbortRange

    inside = [rig.submit(rig.request(chat_ids(tok, f"Tell me story {i}."), max_tokens=500, ignore_eos=True))
              for i in range(2)]
    outside = rig.submit(rig.request(chat_ids(tok, "Hi"), max_tokens=6, ignore_eos=True))
    rig.run_until(lambda: all(r in rig.engine.running for r in inside) and rig.engine.kv_tokens > 0)
    first, end = min(inside), outside  # the rig's rids count up: `outside` is past the range
    for rid in inside:
        rig.receiver.discard(rid)
        del rig.streams[rid]
    rig.engine.handle(AbortRange(first, end))
    assert not any(r in rig.engine.running for r in inside) and rig.engine.stats.aborted == 2
    late = msgspec.structs.replace(rig.request(chat_ids(tok, "Late"), max_tokens=5), rid=first + 1)
    rig.engine.handle(late)  # sent by the dead frontend, read after its range's abort
    assert rig.engine.stats.aborted == 3 and not any(s.rid == first + 1 for s in rig.engine.waiting)
    rig.run_until(lambda: rig.engine.idle and outside in rig.finishes)
    assert rig.finishes[outside].reason == "length" and len(rig.engine.finished_log[outside][0]) == 6
    assert rig.engine.caches == 0 and rig.client.live_rids() == []


def test_seeds_decide_the_samples(rig, tok):
    prompt = tok.encode("Once upon a time", add_special_tokens=False)
    rids = [rig.submit(rig.request(prompt, max_tokens=12, temperature=1.0, seed=s, ignore_eos=True))
            for s in (1, 2, 1)]
    rig.run_all(rids)
    a, b, again = (rig.engine.finished_log[r][0] for r in rids)
    assert a != b  # n=2 with different seeds: different answers
    assert a == again  # the same seed, in another slot of the batch: the same answer


def test_sampling_extras_reach_the_sampler(rig, tok):
    # the frontend's logit_bias / penalties ride GenerateRequest.extras: +100 on one id makes greedy
    # take it every step; a huge presence penalty makes greedy never repeat an output token
    import msgspec

    from detok.wire.to_scheduler import SamplingExtras
    prompt = tok.encode("Once upon a time", add_special_tokens=False)
    target = tok.encode(" sea", add_special_tokens=False)[0]
    biased = msgspec.structs.replace(rig.request(prompt, max_tokens=5, ignore_eos=True),
                                     extras=SamplingExtras(logit_bias=((target, 100.0),)))
    fresh = msgspec.structs.replace(rig.request(prompt, max_tokens=12, ignore_eos=True),
                                    extras=SamplingExtras(presence_penalty=2.0, frequency_penalty=2.0))
    allowed = tok.encode(" one two", add_special_tokens=False)
    narrowed = msgspec.structs.replace(rig.request(prompt, max_tokens=6, temperature=1.0, seed=4, ignore_eos=True),
                                       extras=SamplingExtras(allowed_token_ids=tuple(allowed)))
    unsaid = msgspec.structs.replace(rig.request(prompt, max_tokens=5, ignore_eos=True),
                                     extras=SamplingExtras(logit_bias=((target, 100.0),), bad_words=((target,),)))
    rids = [rig.submit(biased), rig.submit(fresh), rig.submit(narrowed), rig.submit(unsaid)]
    rig.run_all(rids)
    assert rig.engine.finished_log[rids[0]][0] == [target] * 5
    out = rig.engine.finished_log[rids[1]][0]
    assert len(set(out)) == len(out) == 12
    assert set(rig.engine.finished_log[rids[2]][0]) <= set(allowed)
    assert target not in rig.engine.finished_log[rids[3]][0]


def test_logprobs_are_the_models(rig, tok, model):
    prompt = chat_ids(tok, "What is the capital of France?")
    rid = rig.submit(rig.request(prompt, max_tokens=6, logprobs=3, temperature=0.7, seed=3))
    rig.run_all([rid])
    ids, _ = rig.engine.finished_log[rid]
    entries = [e for chunk in rig.logprobs[rid] for e in zip(chunk.token_ids, chunk.logprobs)]
    assert [t for t, _ in entries] == ids
    tops = [chunk for chunk in rig.logprobs[rid]]
    top_lps = np.concatenate([np.array(c.top_logprobs) for c in tops])
    assert all(lp <= 0 for _, lp in entries) and len(top_lps) == 3 * len(ids)
    assert np.all(np.diff(top_lps.reshape(-1, 3), axis=1) <= 0)  # alternatives ordered, most likely first
    cache = model.new_cache(len(prompt) + len(ids))  # the model's own distribution, teacher-forced
    logits = model.forward([Segment(cache, prompt)])
    for token, lp in entries:
        expected = log_softmax(logits)[0]
        assert abs(lp - float(expected[token])) < 1e-3
        logits = model.forward([Segment(cache, [token])])


def test_min_tokens_and_ignore_eos_hold_eos_back(rig, tok):
    prompt = chat_ids(tok, "What is the capital of France?")
    held = rig.submit(rig.request(prompt, max_tokens=20, min_tokens=12))
    ignored = rig.submit(rig.request(prompt, max_tokens=10, ignore_eos=True))
    rig.run_all([held, ignored])
    ids, reason = rig.engine.finished_log[held]
    assert len(ids) >= 12 and 2 not in ids[:12]
    ids, reason = rig.engine.finished_log[ignored]
    assert len(ids) == 10 and reason == "length" and ids[:8] == FRANCE


def test_a_prompt_over_the_context_is_an_error(rig, model):
    rid = rig.submit(rig.request([1] * model.cfg.context_length, max_tokens=4))
    rig.run_until(lambda: rid in rig.finishes)
    assert rig.finishes[rid].reason == "error" and "context" in rig.finishes[rid].message
    assert rig.engine.idle and rig.engine.stats.rejected == 1


@pytest.mark.slow
def test_a_small_kv_budget_preempts_and_recomputes(pool, model_parts, tok):
    """Three sequences in a KV budget for ~two: the newest is preempted and recomputed, all finish,
    and what detok streamed is still the decode of what was generated."""
    model = model_parts[0]
    prompt = chat_ids(tok, "Write a haiku about the sea.")
    budget = (2 * len(prompt) + 30) * model.cfg.kv_bytes_per_token
    rig = EngineRig(pool, *model_parts, limits=EngineLimits(kv_cache_bytes=budget))
    try:
        rids = [rig.submit(rig.request(prompt, max_tokens=24, ignore_eos=True, temperature=0.0)) for _ in range(3)]
        rig.run_all(rids)
        assert rig.engine.stats.preempted > 0
        for rid in rids:
            ids, reason = rig.engine.finished_log[rid]
            assert reason == "length" and len(ids) == 24
            assert rig.text(rid) == tok.decode(ids, skip_special_tokens=True)
    finally:
        rig.close()


def test_a_failing_step_fails_its_batch_and_the_engine_goes_on(rig, tok, monkeypatch):
    from reference_engine.process import run_loop

    rid = rig.submit(rig.request(chat_ids(tok, "Hi"), max_tokens=4))
    rig.engine._admit()

    def broken(*_: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(rig.engine.model, "forward", broken)

    class Inbox:  # nothing from frontends; one round of the loop
        socket = None

        def drain(self, engine: object) -> int:
            return 0

    rounds = iter([False, True])
    run_loop(rig.engine, Inbox(), lambda: next(rounds))  # type: ignore[arg-type]
    rig.run_until(lambda: rid in rig.finishes)
    assert rig.finishes[rid].reason == "error" and "boom" in rig.finishes[rid].message
    assert rig.engine.idle and rig.engine.caches == 0
    monkeypatch.undo()
    again = rig.submit(rig.request(chat_ids(tok, "What is the capital of France?"), max_tokens=12))
    rig.run_all([again])
    assert rig.engine.finished_log[again] == (FRANCE, "stop")


def test_standalone_engine_process_next_to_a_pool(pool, tok, tmp_path):
    """`python -m reference_engine run` next to a pool: a frontend's request over its inbox is
    answered through the workers; SIGTERM stops it cleanly."""
    import signal
    import subprocess
    import sys
    import time

    import zmq

    from detok.receiver.receiver import DeltaReceiver
    from detok.wire.params import DecodeParams
    from detok.wire.codec import new_encoder
    from detok.wire.to_scheduler import GenerateRequest

    inbox = pool.receiver_endpoint("engine-requests")  # in the pool's short ipc folder (path limit 107 bytes)
    notify = pool.notify_endpoint  # where the pool's workers send their notices
    proc = subprocess.Popen([sys.executable, "-m", "reference_engine", "run", "--model", "smollm2",
                             "--workers-endpoints", ",".join(pool.endpoints), "--notify-endpoint", notify,
                             "--requests-endpoint", inbox], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ctx = zmq.Context()
    receiver = DeltaReceiver()
    push = ctx.socket(zmq.PUSH)
    try:
        banner = proc.stdout.readline()
        if "frontends send requests to" not in banner:
            proc.kill()
            raise AssertionError(banner + proc.communicate(timeout=30)[0])
        push.connect(inbox)
        prompt = chat_ids(tok, "What is the capital of France?")
        stream = receiver.open(77)
        push.send(new_encoder().encode(GenerateRequest(77, prompt, DecodeParams(), 12, receiver.endpoint, 0,
                                                       temperature=0.0)))
        text, finish = "", None
        deadline = time.monotonic() + 120
        while finish is None and time.monotonic() < deadline:
            receiver.poll_blocking(0.1)
            while (delta := stream.take()) is not None:
                text, finish = text + delta.text, delta.finish
        assert finish is not None and finish.reason == "stop" and text == "The capital of France is Paris."
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "reference engine stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        push.close(0)
        ctx.term()
        receiver.close()
