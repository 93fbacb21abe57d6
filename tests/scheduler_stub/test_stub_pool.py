"""The scheduler stub against a real pool (worker processes, zmq sockets): it speaks to frontends
over its request inbox, finishes on EOS and length, obeys stop notices and aborts, and runs
headless for load."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from detok.pool.pool import DetokPool
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import Abort, GenerateRequest
from detok.receiver.receiver import DeltaReceiver
from detok.wire.security import SocketSecurity, generate_keys
from detok.wire.params import DecodeParams
from detok.tokenizer.factory import load_tokenizer
from scheduler_stub.generation import RequestGeneration
from scheduler_stub.headless import HeadlessConfig, run_headless
from scheduler_stub.stub import RequestInbox, SchedulerStub, StepPolicy, run_loop
from scheduler_stub.workload import END, CorpusWorkload, embedded_corpus_text
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

GPT2 = str(Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gpt-2")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(GPT2)


@pytest.fixture(scope="module")
def pool():
    with DetokPool(GPT2, workers=2, spare=False) as p:
        yield p


@pytest.fixture(scope="module")
def workload(tok):
    return CorpusWorkload(tok, embedded_corpus_text())


class _Stack:
    """The stub's loop in a thread, with a frontend's two sockets: requests out, deltas in."""

    def __init__(self, pool: DetokPool, tok, workload, policy: StepPolicy) -> None:
        self.ctx = zmq.Context()
        self.client = pool.client(context=self.ctx)
        self.stub = SchedulerStub(self.client, workload, tok.eos_token_ids, policy)
        self.inbox = RequestInbox(self.ctx, pool.receiver_endpoint("stub-inbox"))
        self.receiver = DeltaReceiver()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.connect(self.inbox.endpoint)
        self.encoder = new_encoder()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=run_loop, args=(self.stub, self.inbox, self._stop.is_set), daemon=True)
        self.thread.start()

    def send(self, message: GenerateRequest | Abort) -> None:
        self.push.send(self.encoder.encode(message))

    def request(self, rid: int, max_tokens: int = 200, seed: int = 0, ignore_eos: bool = False,
                **params) -> GenerateRequest:
        return GenerateRequest(rid, [seed, 7], DecodeParams(**params), max_tokens, self.receiver.endpoint, seed,
                               ignore_eos=ignore_eos)

    def collect(self, rids: list[int], timeout: float = 60.0) -> dict[int, tuple[str, object, int]]:
        streams = {rid: self.receiver.open(rid) for rid in rids}
        texts: dict[int, list[str]] = {rid: [] for rid in rids}
        done: dict[int, tuple[str, object, int]] = {}
        deadline = time.monotonic() + timeout
        while len(done) < len(rids) and time.monotonic() < deadline:
            self.receiver.poll_blocking(0.05)
            for rid, stream in streams.items():
                while (delta := stream.take()) is not None:
                    texts[rid].append(delta.text)
                    if delta.finish is not None:
                        done[rid] = ("".join(texts[rid]), delta.finish, delta.num_tokens)
        return done

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.push.close(0)
        self.inbox.close()
        self.client.close()
        self.receiver.close()
        self.ctx.term()


@pytest.fixture
def stack(pool, tok, workload):
    s = _Stack(pool, tok, workload, StepPolicy(step_interval_s=0.002, max_batch=8))
    yield s
    s.close()


def _expected_ids(tok, workload, request: GenerateRequest) -> list[int]:
    gen = RequestGeneration(request, workload, tok.eos_token_ids)
    ids = []
    while True:
        got, end = gen.next_tokens(1)
        ids += got
        if end is not None:
            return ids


def test_eos_and_length_finishes_reach_the_frontend(stack, tok, workload):
    natural = stack.request(1, max_tokens=5000)
    short = stack.request(2, max_tokens=7)
    stack.send(natural)
    stack.send(short)
    done = stack.collect([1, 2])
    eos_ids = _expected_ids(tok, workload, natural)
    text, finish, num_tokens = done[1]
    assert finish.reason == "stop" and num_tokens == len(eos_ids)
    assert text == tok.decode(eos_ids[:-1])  # the EOS token itself is not text
    text, finish, num_tokens = done[2]
    assert finish.reason == "length" and num_tokens == 7
    assert text == tok.decode(_expected_ids(tok, workload, short))


def test_more_requests_than_the_batch_all_finish(stack, tok, workload):
    requests = [stack.request(100 + i, max_tokens=20, seed=i) for i in range(30)]  # max_batch is 8
    for r in requests:
        stack.send(r)
    done = stack.collect([r.rid for r in requests])
    assert len(done) == 30
    for r in requests:
        assert done[r.rid][0] == tok.decode([i for i in _expected_ids(tok, workload, r) if i not in tok.eos_token_ids])
    assert stack.stub.stats.admitted == 30 and not stack.stub.running


def test_stop_string_notice_stops_generation(stack, tok, workload):
    """Only the worker's StopNotice can end this request: no EOS, and max_tokens so far away (200 s
    of steps) that the notice comes back first however slow the box."""
    max_tokens = 100_000
    plain = stack.request(200, max_tokens=400, seed=3, ignore_eos=True)
    full = tok.decode(_expected_ids(tok, workload, plain))
    stop = full[30:35]
    stack.send(stack.request(201, max_tokens=max_tokens, seed=3, ignore_eos=True, stop=(stop,)))
    text, finish, num_tokens = stack.collect([201])[201]
    assert text == full[: full.index(stop)] and finish.reason == "stop" and finish.matched == stop
    wait_until(lambda: stack.stub.stats.stopped_by_workers >= 1, 60, 0.01, "the StopNotice never came back")
    assert stack.stub.stats.stopped_by_workers == 1  # the StopNotice came back and was obeyed
    wait_until(lambda: 201 not in stack.stub.running, 60, 0.01, "the stub still generates rid 201")
    assert stack.stub.stats.tokens < max_tokens  # it stopped generating, long before max_tokens


def test_abort_from_the_frontend(stack):
    stack.send(stack.request(300, max_tokens=100_000, seed=1, min_tokens=100_000))
    stream = stack.receiver.open(300)
    wait_until(lambda: 300 in stack.stub.running, 60, 0.01, "rid 300 never started")
    stack.send(Abort(300))
    text, finish, _ = stack.collect([300])[300]
    assert finish.reason == "abort"
    assert stack.stub.stats.aborted == 1 and 300 not in stack.stub.running
    assert stream.done


def test_abort_of_a_waiting_request_never_reaches_a_worker(pool, tok, workload):
    client = pool.client()
    try:
        stub = SchedulerStub(client, workload, tok.eos_token_ids, StepPolicy(max_batch=1))
        stub.submit(GenerateRequest(1, [1], DecodeParams(), 5, "ipc:///unused", 0))
        stub.submit(GenerateRequest(2, [2], DecodeParams(), 5, "ipc:///unused", 0))
        stub.step()  # admits rid 1 only
        stub.abort(2)
        assert [r.rid for r in stub.waiting] == [] and list(stub.running) == [1]
        assert stub.stats.aborted == 1 and client.live_rids() == [1]
        stub.abort(1)
        assert client.live_rids() == []
    finally:
        client.close()


def test_headless_run(pool):
    cfg = HeadlessConfig(GPT2, requests=60, concurrency=16, max_tokens=24, policy=StepPolicy(0.0, 16), timeout_s=120)
    result = run_headless(cfg, pool)
    assert result.requests == 60 and result.tokens == 60 * 24
    assert result.finish_reasons == {"length": 60} and result.chars > 0
    # max_tokens far away (10 s of steps each): every StopNotice comes back first, however slow the box
    max_tokens = 2000
    stopped = run_headless(
        HeadlessConfig(GPT2, requests=20, concurrency=8, max_tokens=max_tokens, stop=("e", "。", "."),
                       policy=StepPolicy(0.005, 8), timeout_s=120),
        pool,
    )
    assert stopped.finish_reasons == {"stop": 20} and stopped.stopped_by_workers == 20
    assert stopped.tokens < 20 * max_tokens / 2  # the stub stopped generating them once told


def test_corpus_end_marker_is_not_a_token(tok, workload):
    assert END not in _expected_ids(tok, workload, GenerateRequest(5, [5], DecodeParams(), 3000, "x", 0))


def test_standalone_stub_process_next_to_a_pool(pool, tok, workload, tmp_path):
    """`python -m scheduler_stub run`: frontends reach it over tcp (CURVE keys); SIGTERM stops it
    cleanly. Without keys (and without --insecure) it refuses a tcp endpoint."""
    args = [sys.executable, "-m", "scheduler_stub", "run", "--tokenizer", GPT2, "--step-ms", "2",
            "--workers-endpoints", ",".join(pool.endpoints), "--notify-endpoint", pool.notify_endpoint,
            "--requests-endpoint", "tcp://127.0.0.1:*"]  # the stub binds a free port and prints it
    refused = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "need CURVE keys" in refused.stderr
    generate_keys(tmp_path / "keys")
    proc = subprocess.Popen([*args, "--keys", str(tmp_path / "keys")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    ctx = zmq.Context()
    receiver = DeltaReceiver()
    push = ctx.socket(zmq.PUSH)
    security = SocketSecurity(tmp_path / "keys")
    try:
        banner = proc.stdout.readline()
        assert "frontends send requests to tcp://127.0.0.1:" in banner, banner
        endpoint = banner.split("frontends send requests to ")[1].strip()
        security.connect(push, endpoint)
        request = GenerateRequest(9, [4, 2], DecodeParams(), 12, receiver.endpoint, 5)
        stream = receiver.open(9)
        push.send(new_encoder().encode(request))
        text, finish = "", None
        deadline = time.monotonic() + 60
        while finish is None and time.monotonic() < deadline:
            receiver.poll_blocking(0.1)
            while (delta := stream.take()) is not None:
                text, finish = text + delta.text, delta.finish
        assert finish is not None and finish.reason == "length"
        assert text == tok.decode(_expected_ids(tok, workload, request))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert "scheduler stub stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        push.close(0)
        receiver.close()
        ctx.term()


def test_an_abort_range_stops_a_dead_frontends_requests_and_refuses_its_late_ones(pool, tok, workload):
    """A frontend died: every rid of its rid space stops (running: the workers are told; waiting:
    dropped), another frontend's request goes on, and a request of the dead range that arrives
    after the abort (it was still on its way) is refused."""
    from detok.api.scheduler_link import rid_range
    from detok.wire.to_scheduler import AbortRange

    client = pool.client()
    try:
        stub = SchedulerStub(client, workload, tok.eos_token_ids, StepPolicy(max_batch=3))
        first, end = rid_range(1, 5)
        other = rid_range(0, 0)[0] + 1
        dead = [first + 1, first + 2, end - 1, first + 3]  # 2 admitted, 2 waiting
        for rid in [other, *dead]:
            stub.submit(GenerateRequest(rid, [1], DecodeParams(), 10_000, "ipc:///unused", 0, ignore_eos=True))
        stub.step()
        assert sorted(client.live_rids()) == sorted([other, *dead[:2]])
        stub.handle(AbortRange(first, end))
        assert list(stub.running) == [other] and not stub.waiting and client.live_rids() == [other]
        assert stub.stats.aborted == 4
        stub.handle(GenerateRequest(first + 9, [1], DecodeParams(), 10, "ipc:///unused", 0))  # late
        stub.step()
        assert list(stub.running) == [other] and stub.stats.aborted == 5
        for hostile in (AbortRange(end, first), AbortRange(0, 2**64 - 1), AbortRange(-1, 10)):
            stub.handle(hostile)  # empty or outside the rid space: ignored
        assert list(stub.running) == [other] and stub.stats.aborted == 5
    finally:
        client.close()
