"""Exact replay, in-process: the real SchedulerClient (over real sockets to stand-in workers) and
real WorkerCores, a core "killed" at a random message with the outputs of its unacknowledged
messages lost, its replacement rebuilt from the client's replay, and a receiver that de-duplicates
by char offset. Every request's text must equal the oracle - stop strings, min_tokens, multi-byte
characters and speculative steps included - with nothing lost, repeated or failed."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detok
from detok import wire as p
from detok.scheduler.client import SchedulerClient
from detok.wire.endpoints import IpcDir
from detok.scheduler.step_logprobs import LogprobColumns
from detok.wire.params import DecodeParams, Finish
from detok.receiver.token_logprobs import split_logprobs
from detok.worker.core import Outputs, WorkerCore
from scheduler_stub.logprobs import token_logprobs
from tests.helpers.fake_workers import FakeWorkers
from tests.helpers.pool_helpers import reference
import tests.helpers.stream_roster as stream_roster

pytestmark = pytest.mark.timeout(300)

FE = "ipc:///tmp/detok-replay-test/fe"
TEXT = "Hello, world! 北京欢迎你 🫨👍🏽 def f(x):\n    return x ** 2\nÀ la carte — «quotes» END नमस्ते. "


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return stream_roster.get("qwen2")  # (shared by the process's tests: one load and decode plan)


@dataclass
class Req:
    rid: int
    context: list[int]
    tokens: list[int]
    params: DecodeParams
    end: str = "length"
    logprobs: int | None = None  # alternatives per token the request asked for


@dataclass
class Receiver:
    """What a DeltaReceiver keeps per request: text cut by offset, logprob entries by token index
    (a replayed entry must equal the first), the first finish."""

    text: dict[int, str] = field(default_factory=dict)
    finish: dict[int, Finish] = field(default_factory=dict)
    entries: dict[int, dict[int, tuple]] = field(default_factory=dict)

    def take(self, out: Outputs) -> None:
        for _, batch in out.deltas:
            if batch.logprobs is not None:
                for rid, run, _, _ in split_logprobs(batch.logprobs):
                    if rid in self.finish:
                        continue
                    got = self.entries.setdefault(rid, {})
                    j = 0
                    for i, (tid, lp, k) in enumerate(zip(run.token_ids, run.logprobs, run.top_counts)):
                        entry = (tid, run.tokens[i], lp, tuple(run.top_ids[j : j + k]), tuple(run.top_logprobs[j : j + k]))
                        j += k
                        assert got.setdefault(run.first + i, entry) == entry, f"rid {rid}: a different entry {run.first + i}"
            for rid, text, offset in batch.rows():
                if not text or rid in self.finish:
                    continue
                have = self.text.setdefault(rid, "")
                assert offset <= len(have), f"rid {rid}: a gap (have {len(have)}, delta at {offset})"
                self.text[rid] = have + text[len(have) - offset :]
            for done in batch.finished:
                self.finish.setdefault(done.rid, done.finish)


def make_requests(tok, n: int, rng: random.Random) -> list[Req]:
    ids = tok.encode(TEXT * 6)
    out = []
    for i in range(n):
        start = rng.randrange(0, len(ids) - 60)
        length = rng.randint(5, 50)
        params = DecodeParams(
            stop=("END", "\n\n") if rng.random() < 0.4 else (),
            min_tokens=rng.choice([0, 0, 3, 12]),
            include_stop_str_in_output=rng.random() < 0.3,
        )
        out.append(Req(1000 + i, ids[start : start + 5], ids[start + 5 : start + 5 + length], params,
                       rng.choice(["length", "stop"]), rng.choice([None, None, 0, 3])))
    return out


def _logprob_columns(by_rid: dict[int, Req], rids: list[int], starts: list[int], counts: list[int], tokens: list[int],
                     vocab: int) -> LogprobColumns | None:
    """The stub's deterministic logprobs for the rows of requests that asked."""
    rows, sampled, top_counts, top_ids, top_lps = [], [], [], [], []
    at = 0
    for row, (rid, start, count) in enumerate(zip(rids, starts, counts)):
        k = by_rid[rid].logprobs
        if k is not None:
            rows.append(row)
            for j in range(count):
                lp, ids, lps = token_logprobs(rid, start + j, tokens[at + j], k, vocab)
                sampled.append(lp), top_counts.append(len(ids)), top_ids.extend(ids), top_lps.extend(lps)
        at += count
    return LogprobColumns(rows, sampled, top_counts, top_ids, top_lps) if rows else None


def run_with_kills(tok, requests: list[Req], rng: random.Random, kills: int, workers: int = 2) -> Receiver:
    """Drive `requests` through the client to in-process cores, killing cores at random points."""
    ipc = IpcDir(prefix="detok-replay-")
    fake = FakeWorkers(ipc, workers)
    client = SchedulerClient(fake.endpoints, fake.notify)
    notices = __import__("zmq").Context.instance().socket(__import__("zmq").PUSH)
    notices.connect(fake.notify)
    encoder = p.new_encoder()
    rx = Receiver()
    cores = [WorkerCore(tok, w) for w in range(workers)]
    unacked: list[list[Outputs]] = [[] for _ in range(workers)]  # outputs not yet known delivered
    try:
        for w in range(workers):
            cores[w].instance = 100 + w
        kill_at = sorted(rng.sample(range(1, 60), kills)) if kills else []
        pos = {r.rid: 0 for r in requests}
        by_rid = {r.rid: r for r in requests}
        for r in requests:
            client.add_request(p.Registration(r.rid, FE, r.context, r.params, logprobs=r.logprobs))
        step = 0

        def pump(w: int) -> None:
            while fake.inputs[w].poll(0):
                msg = fake.decoder.decode(fake.inputs[w].recv())
                core = cores[w]
                if isinstance(msg, p.Replay):
                    out = core.handle_replay(msg)
                elif isinstance(msg, p.DetokBatch):
                    out = core.handle_batch(msg)
                else:
                    out = core.handle_fail(msg)
                unacked[w].append(out)
                if out.notice is not None:
                    notices.send(encoder.encode(out.notice))
                if rng.random() < 0.5:  # deliver, then acknowledge (a worker acks after sending)
                    for o in unacked[w]:
                        rx.take(o)
                    unacked[w].clear()
                    synced = not core.awaiting_replay
                    notices.send(encoder.encode(p.WorkerStatus(w, core.instance, synced, core.last_seq, 1)))

        while pos or any(fake.inputs[w].poll(0) for w in range(workers)):
            for s in client.poll():
                pos.pop(s.rid, None)
            if pos:
                rids, starts, counts, tokens, ends = [], [], [], [], []
                for rid, at in list(pos.items()):
                    r = by_rid[rid]
                    k = min(rng.randint(1, 3), len(r.tokens) - at)
                    rids.append(rid), starts.append(at), counts.append(k)
                    tokens += r.tokens[at : at + k]
                    pos[rid] = at + k
                    if pos[rid] == len(r.tokens):
                        ends.append((rid, r.end))
                        del pos[rid]
                lp = _logprob_columns(by_rid, rids, starts, counts, tokens, tok.vocab_size)
                client.send_step(rids, tokens, counts, starts=starts, ends=ends, logprobs=lp)
            for w in range(workers):
                pump(w)
            step += 1
            if kill_at and step >= kill_at[0]:
                kill_at.pop(0)
                w = rng.randrange(workers)
                unacked[w].clear()  # the dead process's unsent deltas are lost
                cores[w] = WorkerCore(tok, w)
                cores[w].instance = 1000 * step + w
                cores[w].awaiting_replay = True
                notices.send(encoder.encode(p.WorkerStatus(w, cores[w].instance, False, 0, 2)))
        # settle: the replacement's replay, the last deliveries
        for _ in range(200):
            client.poll(0.01)
            for w in range(workers):
                pump(w)
                for o in unacked[w]:
                    rx.take(o)
                unacked[w].clear()
            if all(not c.awaiting_replay for c in cores) and len(rx.finish) == len(requests):
                break
        return rx
    finally:
        notices.close(0)
        client.close()
        fake.close()
        ipc.remove()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), kills=st.integers(1, 4))
def test_replay_after_random_kills_gives_every_request_its_exact_text(tok, seed: int, kills: int) -> None:
    rng = random.Random(seed)
    requests = make_requests(tok, 24, rng)
    with pytest.MonkeyPatch.context() as patch:
        # keep an ended request exactly until its end is acknowledged (the test delivers a
        # message's outputs before acknowledging it, as a worker sends before it reports)
        patch.setattr("detok.scheduler.replay_book.ACKED_KEEP_S", 0.0)
        rx = run_with_kills(tok, requests, rng, kills)
    for r in requests:
        want_text, want_finish = reference(tok, r, r.end)
        assert rx.finish.get(r.rid) is not None, f"rid {r.rid} never finished"
        assert rx.finish[r.rid].reason != "error", rx.finish[r.rid]
        assert rx.text.get(r.rid, "") == want_text, r.rid
        assert (rx.finish[r.rid].reason, rx.finish[r.rid].matched) == (want_finish.reason, want_finish.matched)
    # logprobs survive the kills too: one entry per token the request consumed, none repeated
    # differently, the same as an unkilled run gives
    calm = run_with_kills(tok, requests, random.Random(seed), 0)
    for r in requests:
        if r.logprobs is not None:
            got = rx.entries.get(r.rid, {})
            assert sorted(got) == list(range(len(got))) and got == calm.entries.get(r.rid, {}), r.rid


def test_a_waiting_core_drops_batches_and_ignores_replays_for_other_processes(tok) -> None:
    core = WorkerCore(tok, 0)
    core.instance, core.awaiting_replay = 7, True
    reg = p.Registration(1, FE, tok.encode("Hi"), DecodeParams())
    batch = p.DetokBatch(3, 0.0, [reg], p.pack_rids([1]), p.pack_u32([0]), b"", p.pack_u32(tok.encode(" there")[:1]), [])
    assert core.handle_batch(batch) == Outputs([], None) and not core.live
    assert core.counts.replay_dropped_batches == 1
    assert core.handle_replay(p.Replay(8, batch)) == Outputs([], None) and core.awaiting_replay
    assert core.counts.stale_replays == 1
    rx = Receiver()
    rx.take(core.handle_replay(p.Replay(7, batch, "test")))
    assert not core.awaiting_replay and core.last_seq == 3 and rx.text[1] == " there"
    assert core.counts.replays == 1 and core.counts.replayed_tokens == 1


def test_a_replay_is_authoritative_and_idempotent(tok) -> None:
    core = WorkerCore(tok, 0)
    ids = tok.encode(" one two three")
    regs = [p.Registration(r, FE, [], DecodeParams()) for r in (1, 2)]
    rx = Receiver()
    rx.take(core.handle_batch(p.DetokBatch(1, 0.0, regs, p.pack_rids([1, 2]), p.pack_u32([0, 0]), b"", p.pack_u32(ids[:2]), [])))
    # the same shard again (e.g. a retried replay): nothing re-emitted, nothing reopened
    again = p.DetokBatch(2, 0.0, regs[:1], p.pack_rids([1]), p.pack_u32([0]), p.pack_u32([3]), p.pack_u32(ids), [])
    out = core.handle_replay(p.Replay(0, again, "client restarted"))
    rx.take(out)
    assert rx.text[1] == " one two three"
    # rid 2 is not in the replay: its client no longer has it - finished with an error, named
    assert rx.finish[2].reason == "error" and "no longer holds" in rx.finish[2].message
    assert out.notice is not None and 2 in out.notice.rids
    # a finished request is not reopened by a later replay naming it
    end = p.DetokBatch(3, 0.0, [], b"", b"", b"", b"", [p.EndRequest(1, "length")])
    rx.take(core.handle_batch(end))
    rx.take(core.handle_replay(p.Replay(0, again)))
    assert 1 not in core.live and rx.finish[1].reason == "length"
