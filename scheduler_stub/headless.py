"""Headless load: the stub drives a pool with synthetic requests, no HTTP frontend.

The process plays scheduler and frontend at once: it keeps `concurrency` requests in flight,
steps the stub at its interval, and receives the deltas itself (blocking receiver, same thread).
It reports tokens per second through the pool and the detok path's latency: the time from the
scheduler sending a step to the deltas of that step arriving back (`DeltaBatch.sent_at`).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time

import numpy as np

from detok.wire.packing import unpack_u32
from detok.pool.pool import DetokPool
from detok.wire.to_frontends import DeltaBatch
from detok.wire.to_scheduler import GenerateRequest
from detok.receiver.receiver import DeltaReceiver
from detok.wire.params import DecodeParams
from scheduler_stub.generation import primary_eos_id
from scheduler_stub.stub import SchedulerStub, StepPolicy
from scheduler_stub.workload import make_workload


@dataclasses.dataclass(frozen=True)
class HeadlessConfig:
    tokenizer: str
    workers: int = 2
    requests: int = 1000
    concurrency: int = 256
    max_tokens: int = 256
    workload: str = "corpus"
    policy: StepPolicy = StepPolicy(step_interval_s=0.0)
    stop: tuple[str, ...] = ()
    timeout_s: float = 300.0


@dataclasses.dataclass
class HeadlessResult:
    requests: int
    seconds: float
    tokens: int
    chars: int
    steps: int
    stopped_by_workers: int
    finish_reasons: dict[str, int]
    detok_latency_p50_ms: float
    detok_latency_p99_ms: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "tokens_per_s": round(self.tokens_per_s, 1)})


class _Sink:
    """Counts what comes back: chars, finishes, per-batch latency since the scheduler sent it."""

    def __init__(self) -> None:
        self.chars = 0
        self.finished: dict[int, str] = {}
        self.latencies: list[float] = []

    def __call__(self, batch: DeltaBatch) -> None:
        self.latencies.append(time.time() - batch.sent_at)
        self.chars += sum(unpack_u32(batch.lengths))
        for done in batch.finished:
            self.finished.setdefault(done.rid, done.finish.reason)


def run_headless(cfg: HeadlessConfig, pool: DetokPool | None = None) -> HeadlessResult:
    """Run the load on `pool` (its tokenizer must be `cfg.tokenizer`), or on a new pool of `cfg.workers`."""
    from detok.tokenizer.factory import load_tokenizer

    tok = load_tokenizer(cfg.tokenizer)
    workload = make_workload(cfg.workload, tok)
    params = DecodeParams(stop=cfg.stop)
    own_pool = pool is None
    if pool is None:
        pool = DetokPool(cfg.tokenizer, cfg.workers)
    sink = _Sink()
    receiver = DeltaReceiver(on_batch=sink)
    client = pool.client()
    stub = SchedulerStub(client, workload, tok.eos_token_ids, cfg.policy, primary_eos_id(tok))
    try:
        seconds = _drive(cfg, stub, receiver, sink, params)
    finally:
        client.close()
        receiver.close()
        if own_pool:
            pool.close()
    reasons: dict[str, int] = {}
    for reason in sink.finished.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    lat = np.asarray(sink.latencies) * 1000 if sink.latencies else np.zeros(1)
    return HeadlessResult(
        requests=len(sink.finished),
        seconds=seconds,
        tokens=stub.stats.tokens,
        chars=sink.chars,
        steps=stub.stats.steps,
        stopped_by_workers=stub.stats.stopped_by_workers,
        finish_reasons=reasons,
        detok_latency_p50_ms=float(np.percentile(lat, 50)),
        detok_latency_p99_ms=float(np.percentile(lat, 99)),
    )


def _drive(
    cfg: HeadlessConfig, stub: SchedulerStub, receiver: DeltaReceiver, sink: _Sink, params: DecodeParams
) -> float:
    submitted = 0
    # rids above a random base: a pool shared with other schedulers' requests sees no collision
    rid_base = secrets.randbits(40) << 20
    interval = cfg.policy.step_interval_s
    start = time.monotonic()
    deadline = start + cfg.timeout_s
    next_step = start
    # done when every request finished at the receiver and the scheduler ended them all too
    # (a stop string ends a request at the worker first; the stub hears of it a step later)
    while len(sink.finished) < cfg.requests or not stub.idle:
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(
                f"headless run: {len(sink.finished)} of {cfg.requests} requests done in {cfg.timeout_s:g} s"
            )
        in_flight = submitted - len(sink.finished)
        while submitted < cfg.requests and in_flight < cfg.concurrency:
            submitted += 1
            in_flight += 1
            stub.submit(
                GenerateRequest(
                    rid=rid_base + submitted,
                    prompt_ids=stub.workload.sample_prompt(submitted),
                    params=params,
                    max_tokens=cfg.max_tokens,
                    reply_to=receiver.endpoint,
                    seed=submitted,
                    ignore_eos=True,  # fixed-length outputs: comparable runs
                )
            )
        if now >= next_step and not stub.idle:
            stub.step()
            next_step = max(next_step + interval, time.monotonic())
        # until the next step, or a while when everything is sent and only deltas are awaited
        wait = next_step - time.monotonic() if not stub.idle else 0.05
        receiver.poll_blocking(max(0.0, wait))
    return time.monotonic() - start
