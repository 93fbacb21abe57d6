"""Helpers for the multiprocess pool tests: workloads, a step driver, collection with timeouts."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from detok.scheduler.client import SchedulerClient
from detok.wire.to_workers import Registration
from detok.receiver.receiver import DeltaReceiver, RequestStream
from detok.stream import DecodeStream
from detok.wire.params import DecodeParams, Finish
from tests.helpers.tokenizers_available import corpus_text

MIXED = "Hello, world! 北京欢迎你 🫨👍🏽 def f(x):\n    return x ** 2\nÀ la carte — «quotes» नमस्ते. "


@dataclass
class Request:
    rid: int
    context: list[int]
    tokens: list[int]
    params: DecodeParams = field(default_factory=DecodeParams)


def workload(tok, n: int, length: int, *, seed: int = 0, first_rid: int = 0) -> list[Request]:
    ids = tok.encode(corpus_text()[:200_000] + MIXED * 40)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        start = rng.randrange(0, len(ids) - length - 5)
        out.append(Request(first_rid + i, ids[start : start + 5], ids[start + 5 : start + 5 + length]))
    return out


def reference(tok, req: Request, end: str = "length") -> tuple[str, Finish]:
    """What the pool must produce: the same tokens through an in-process DecodeStream."""
    stream = DecodeStream(tok, req.context, req.params)
    text = []
    for t in req.tokens:
        d = stream.step([t])
        text.append(d.text)
        if d.finish is not None:
            return "".join(text), d.finish
    d = stream.finish(end)  # type: ignore[arg-type]
    return "".join(text) + d.text, d.finish  # type: ignore[return-value]


class Collected:
    def __init__(self, rx: DeltaReceiver, rids: list[int]) -> None:
        self.rx = rx
        self.streams: dict[int, RequestStream] = {r: rx.open(r) for r in rids}
        self.text: dict[int, str] = {r: "" for r in rids}
        self.finish: dict[int, Finish] = {}
        self.num_tokens: dict[int, int] = {}

    def pump(self, timeout: float = 0.0) -> None:
        self.rx.poll_blocking(timeout)
        for rid, stream in self.streams.items():
            if rid in self.finish:
                continue
            delta = stream.take()
            if delta is not None:
                self.text[rid] += delta.text
                if delta.finish is not None:
                    self.finish[rid] = delta.finish
                    self.num_tokens[rid] = delta.num_tokens or 0

    def wait_finished(self, rids: list[int] | None = None, timeout: float = 60.0) -> None:
        wanted = set(self.streams if rids is None else rids)
        deadline = time.monotonic() + timeout
        while not wanted <= self.finish.keys():
            if time.monotonic() > deadline:
                missing = sorted(wanted - self.finish.keys())
                raise AssertionError(f"{len(missing)} requests never finished, e.g. {missing[:5]}")
            self.pump(0.05)


def drive(
    client: SchedulerClient,
    requests: list[Request],
    reply_to: str,
    *,
    max_count: int = 1,
    seed: int = 0,
    end_reason: str = "length",
    between_steps: Callable[[int], None] | None = None,
    step_sleep: float = 0.0,
    register: bool = True,
) -> list:
    """Register (unless the caller did) and step all requests to the end (several tokens per
    step when max_count > 1), ending each with `end_reason`. Returns what client.poll() reported."""
    rng = random.Random(seed)
    for r in requests if register else ():
        client.add_request(Registration(r.rid, reply_to, r.context, r.params))
    pos = {r.rid: 0 for r in requests}
    by_rid = {r.rid: r for r in requests}
    stopped: list = []
    step = 0
    while pos:
        stopped.extend(client.poll())
        for s in stopped:
            pos.pop(s.rid, None)
        rids, starts, counts, tokens, ends = [], [], [], [], []
        for rid, p in list(pos.items()):
            toks = by_rid[rid].tokens
            k = min(rng.randint(1, max_count), len(toks) - p)
            rids.append(rid), starts.append(p), counts.append(k)
            tokens.extend(toks[p : p + k])
            pos[rid] = p + k
            if pos[rid] == len(toks):
                ends.append((rid, end_reason))
                del pos[rid]
        full = client.send_step(rids, tokens, counts if max_count > 1 else None, starts=starts, ends=ends)
        assert full == [] or client.backlog(full[0]) > 0
        if between_steps is not None:
            between_steps(step)
        step += 1
        if step_sleep:
            time.sleep(step_sleep)
    deadline = time.monotonic() + 60.0
    while any(client.backlog(w) for w in range(client.workers)) and time.monotonic() < deadline:
        client.flush()
        time.sleep(0.01)
    return stopped


def poll_until(client: SchedulerClient, done: Callable[[list], bool], timeout: float = 60.0) -> list:
    """Polls the scheduler client (as a scheduler does every step) until `done(stopped so far)`;
    returns what it reported. Fails after `timeout` s (generous: a loaded box is slow)."""
    stopped: list = []
    deadline = time.monotonic() + timeout
    while not done(stopped):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out polling the scheduler client ({len(stopped)} stopped so far)")
        stopped.extend(client.poll(0.05))
    return stopped
