"""Scheduler-side processes of the pool benchmark: the same workload, step by step, into detok's
pool (through `SchedulerClient`) or into a baseline worker (pickled batches, SGLang's shape).

Arrivals are continuous batching at steady state: `rounds x concurrency` requests of `tokens`
output ids each, request k starting at step k * tokens // concurrency, so about `concurrency` run
at every step once the ramp is over and each step admits and ends a few (`--arrival waves` instead
starts `concurrency` requests at once, one wave after the other).

Each driver runs in its own process (spawned), waits for "go" on its pipe, sends every step, then
reports its CPU time and waits for "stop" (its sockets stay open until the receiver has it all).
Pacing: with an interval, steps start on a fixed schedule (a late step is sent at once, the
schedule is not shifted); without, as fast as the worker's queue takes them - a full queue
(`send_step` reports it) is retried after 50 us.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import zmq

_RETRY_S = 50e-6


@dataclass
class Workload:
    """Contexts and output ids of `concurrency` distinct requests; request k replays k % concurrency."""

    contexts: list[list[int]]
    outputs: np.ndarray  # (tokens, concurrency) uint32: row j holds every request's j-th id
    rounds: int
    staggered: bool = True

    @property
    def concurrency(self) -> int:
        return int(self.outputs.shape[1])

    @property
    def tokens(self) -> int:
        return int(self.outputs.shape[0])

    @property
    def requests(self) -> int:
        return self.concurrency * self.rounds

    def start_step(self, k: np.ndarray) -> np.ndarray:
        if self.staggered:
            return (k * self.tokens) // self.concurrency
        return (k // self.concurrency) * self.tokens


@dataclass
class LogprobTable:
    """Made-up top-k logprobs of every request's every token (the sampled id first, sorted), as a
    sampler hands them to the scheduler; gathered per step like the token ids."""

    k: int
    sampled: np.ndarray  # (tokens, concurrency) float32
    top_ids: np.ndarray  # (tokens, concurrency, k) uint32
    top_logprobs: np.ndarray  # (tokens, concurrency, k) float32

    @classmethod
    def make(cls, outputs: np.ndarray, k: int, vocab_size: int, seed: int = 0) -> LogprobTable:
        rng = np.random.default_rng(seed)
        first = -rng.uniform(0.0, 0.5, size=outputs.shape)
        gaps = rng.uniform(0.25, 2.25, size=(*outputs.shape, max(k, 1)))
        gaps[..., 0] = 0.0
        top_lps = (first[..., None] - np.cumsum(gaps, axis=-1)).astype(np.float32)
        top_ids = rng.integers(0, vocab_size, size=(*outputs.shape, max(k, 1)), dtype=np.uint32)
        top_ids[..., 0] = outputs
        return cls(k, top_lps[..., 0].copy(), top_ids[..., :k].copy(), top_lps[..., :k].copy())

    def columns(self, step: Step, concurrency: int) -> Any:
        from detok.scheduler.step_logprobs import LogprobColumns

        where = (step.positions, step.ks % concurrency)
        n = len(step.ks)
        return LogprobColumns(np.arange(n), self.sampled[where], np.full(n, self.k, dtype=np.uint32),
                              self.top_ids[where].reshape(-1), self.top_logprobs[where].reshape(-1))


@dataclass
class Step:
    ks: np.ndarray  # request numbers getting a token, ascending
    positions: np.ndarray  # index of that token in each request's output
    tokens: np.ndarray  # uint32, one per request
    new: np.ndarray  # request numbers starting at this step
    ending: np.ndarray  # request numbers whose last token this is


def steps(w: Workload) -> Iterator[Step]:
    """The requests of every scheduler step (request k's window is contiguous, so each step is a
    contiguous range of request numbers)."""
    k_all = np.arange(w.requests, dtype=np.int64)
    starts = w.start_step(k_all)
    last_step = int(starts[-1]) + w.tokens
    lo = hi = 0
    for s in range(last_step):
        while hi < w.requests and starts[hi] <= s:
            hi += 1
        while lo < hi and starts[lo] + w.tokens <= s:
            lo += 1
        ks = k_all[lo:hi]
        pos = s - starts[lo:hi]
        yield Step(ks, pos, w.outputs[pos, ks % w.concurrency], ks[pos == 0], ks[pos == w.tokens - 1])


class _Pacer:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.next_at = time.perf_counter()

    def wait(self) -> None:
        if self.interval_s <= 0:
            return
        self.next_at += self.interval_s
        while True:
            left = self.next_at - time.perf_counter()
            if left <= 0:
                return
            if left > 0.0001:
                # sleep most of it, spin the last ~50 us for a precise start (a longer spin takes
                # a share of the 2 cores from the processes being measured)
                time.sleep(left - 0.00005)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _handshake(conn: Connection) -> None:
    # The plan and the client are built: out of the collector's reach, as a serving scheduler
    # freezes its startup heap, so a full collection does not pause a step.
    gc.collect()
    gc.freeze()
    conn.send(("ready", os.getpid()))
    assert conn.recv() == "go"


def run_detok_scheduler(
    conn: Connection,
    workload: Workload,
    worker_endpoints: list[str],
    notify_endpoint: str,
    reply_to: str,
    interval_s: float,
    hwm: int,
    logprobs: LogprobTable | None = None,
    keys: Any = None,
) -> None:
    from detok.scheduler.client import SchedulerClient
    from detok.wire.to_workers import Registration
    from detok.wire.params import DecodeParams

    client = SchedulerClient(worker_endpoints, notify_endpoint, hwm=hwm, keys=keys)
    params = DecodeParams()
    n = workload.concurrency
    plan = list(steps(workload))  # built before "go": the scheduler's own bookkeeping is not timed
    _handshake(conn)
    cpu0 = _cpu_seconds()
    pacer = _Pacer(interval_s)
    full_waits = 0
    want = None if logprobs is None else logprobs.k
    for step in plan:
        for k in step.new.tolist():
            client.add_request(Registration(k, reply_to, workload.contexts[k % n], params, logprobs=want))
        ends = [(k, "length") for k in step.ending.tolist()]
        columns = None if logprobs is None else logprobs.columns(step, n)
        full = client.send_step(step.ks, step.tokens, starts=step.positions, ends=ends, logprobs=columns)
        while full:
            full_waits += 1
            time.sleep(_RETRY_S)
            full = client.flush()
        pacer.wait()
    conn.send(("done", _cpu_seconds() - cpu0, full_waits))
    conn.recv()  # "stop": the receiver has everything
    client.close()


def run_baseline_scheduler(conn: Connection, workload: Workload, in_endpoint: str, interval_s: float, hwm: int) -> None:
    """The driver side of bench/baselines_pipeline.py's workers: pickled (send_time, rids,
    token_lists, finished, context_lens) per step, rids as strings, the prompt tail first."""
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, hwm)
    push.setsockopt(zmq.LINGER, 1000)
    push.bind(in_endpoint)
    n = workload.concurrency
    plan = list(steps(workload))
    names = [f"r{k}" for k in range(workload.requests)]  # a scheduler holds its rid strings already
    _handshake(conn)
    cpu0 = _cpu_seconds()
    pacer = _Pacer(interval_s)
    full_waits = 0
    for step in plan:
        ks, pos = step.ks.tolist(), step.positions.tolist()
        rids = [names[k] for k in ks]
        token_lists = [[t] for t in step.tokens.tolist()]
        context_lens = [0] * len(ks)
        for i, p in enumerate(pos):
            if p == 0:  # a new request: its prompt tail first, as SGLang's read offset
                ctx_ids = workload.contexts[ks[i] % n]
                token_lists[i] = ctx_ids + token_lists[i]
                context_lens[i] = len(ctx_ids)
        finished = [p == workload.tokens - 1 for p in pos]
        msg = (time.time(), rids, token_lists, finished, context_lens)
        while True:
            try:
                push.send_pyobj(msg, zmq.NOBLOCK)
                break
            except zmq.Again:
                full_waits += 1
                time.sleep(_RETRY_S)
        pacer.wait()
    conn.send(("done", _cpu_seconds() - cpu0, full_waits))
    conn.recv()
    push.send_pyobj(None)  # stops the worker
    push.close()
    ctx.term()
