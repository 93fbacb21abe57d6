"""A scheduler loop that reuses a few request ids over and over against a real pool: each round of
a rid ends one way (the scheduler's end, a stop string, a stop id, an abort, an error), and the
next request with that rid starts right after its stream finished or some steps later, while
workers may be SIGKILLed. Every round's text and finish are checked against an in-process
DecodeStream over the same ids."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass

from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver, RequestStream
from detok.scheduler.client import SchedulerClient
from detok.stream.decode_stream import DecodeStream
from detok.wire.params import DecodeParams, Finish
from detok.wire.to_workers import Registration

KINDS = ("length", "stop_string", "stop_id", "abort", "error")


@dataclass(frozen=True)
class Round:
    """One request: which rid slot, how it ends, where it is cut, steps before the next request
    with the same rid starts (0: right after its stream finished), and whether a worker is killed
    at its `cut`-th token."""

    slot: int
    kind: str
    cut: float  # 0..1: where an abort / error / stop id / stop string falls
    delay: int
    kill: bool


@dataclass
class _Live:
    rid: int
    round: Round
    tokens: list[int]
    params: DecodeParams
    stream: RequestStream
    expected: tuple[str, Finish]
    stop_at: int  # abort / error after this many tokens (else len(tokens))
    pos: int = 0
    done_sending: bool = False
    text: str = ""


def expected(tok, context: list[int], tokens: list[int], params: DecodeParams, end: str, message: str | None,
             matched: int | None = None) -> tuple[str, Finish]:
    """Text and finish of `tokens` stepped one by one in an in-process DecodeStream, then ended by
    the scheduler (`end`, with its `message` and stop id `matched`) unless they finished it."""
    stream = DecodeStream(tok, context, params)
    text = []
    for t in tokens:
        d = stream.step([t])
        text.append(d.text)
        if d.finish is not None:
            return "".join(text), d.finish
    d = stream.finish(end, message)  # type: ignore[arg-type]
    finish = d.finish
    assert finish is not None
    if matched is not None and finish.reason == end and finish.matched is None:
        finish = Finish(end, matched, message)  # type: ignore[arg-type]  # (the stream knows no scheduler's stop id)
    return "".join(text) + d.text, finish


class ReuseRun:
    def __init__(self, tok, pool: DetokPool, client: SchedulerClient, rx: DeltaReceiver, ids: list[int], seed: int) -> None:
        self.tok, self.pool, self.client, self.rx, self.ids = tok, pool, client, rx, ids
        self.rng = random.Random(seed)
        self.results: list[tuple[Round, str, Finish, str, Finish]] = []  # round, got, want
        self.kills = 0

    def _request(self, rid: int, rnd: Round) -> _Live:
        rng, ids = self.rng, self.ids
        length = rng.randint(4, 24)
        start = rng.randrange(5, len(ids) - length)
        context, tokens = ids[start - 5 : start], ids[start : start + length]
        cut = max(1, min(length, int(rnd.cut * length)))
        params = DecodeParams()
        stop_at = length
        message = None
        if rnd.kind == "stop_id":
            params = DecodeParams(stop_token_ids=(tokens[cut - 1],))
        elif rnd.kind == "stop_string":
            full = self.tok.decode(context + tokens)[len(self.tok.decode(context)) :]
            at = min(len(full) - 1, int(rnd.cut * len(full))) if full else 0
            stop = full[at : at + 3].strip() or "zz"
            params = DecodeParams(stop=(stop,))
        elif rnd.kind in ("abort", "error"):
            stop_at = cut
            message = f"failed {rid}" if rnd.kind == "error" else None
        end = rnd.kind if rnd.kind in ("abort", "error") else "length"
        want = expected(self.tok, context, tokens[:stop_at], params, end, message)
        stream = self.rx.open(rid)
        self.client.add_request(Registration(rid, self.rx.endpoint, context, params))
        return _Live(rid, rnd, tokens, params, stream, want, stop_at)

    def run(self, rounds: list[Round], rids: list[int], timeout: float = 60.0) -> None:
        """Play `rounds` (each on rid `rids[round.slot]`, in order per slot) to the end."""
        queues: dict[int, list[Round]] = {i: [r for r in rounds if r.slot == i] for i in range(len(rids))}
        live: dict[int, _Live] = {}
        ready_at: dict[int, int] = dict.fromkeys(queues, 0)
        step = 0
        deadline = time.monotonic() + timeout
        while any(queues.values()) or live:
            if time.monotonic() > deadline:
                raise AssertionError(f"stuck: live {[(x.rid, x.round, x.text) for x in live.values()]}")
            for slot, queue in queues.items():
                if slot not in live and queue and step >= ready_at[slot]:
                    live[slot] = self._request(rids[slot], queue.pop(0))
            stopped = {s.rid for s in self.client.poll()}
            rows, tokens, ends = [], [], []
            for x in live.values():
                if x.done_sending:
                    continue
                if x.rid in stopped:  # the worker finished it (stop string / id): stop generating
                    x.done_sending = True
                    continue
                if x.pos < x.stop_at:
                    rows.append(x.rid)
                    tokens.append(x.tokens[x.pos])
                    x.pos += 1
                    if x.round.kill and x.pos == x.stop_at // 2 + 1:
                        self._kill(x.rid)
                    continue
                x.done_sending = True
                if x.round.kind == "abort":
                    self.client.abort(x.rid)
                elif x.round.kind == "error":
                    self.client.fail(x.rid, x.expected[1].message or "")
                else:
                    ends.append((x.rid, "length"))
            self.client.send_step(rows, tokens, ends=ends)
            self.rx.poll_blocking(0.002)
            for slot, x in list(live.items()):
                delta = x.stream.take()
                if delta is None:
                    continue
                x.text += delta.text
                if delta.finish is not None:
                    self.results.append((x.round, x.text, delta.finish, *x.expected))
                    del live[slot]
                    ready_at[slot] = step + 1 + x.round.delay
            step += 1

    def _kill(self, rid: int) -> None:
        pid = self.pool.pids()[self.client.worker_of(rid)]
        if pid:
            os.kill(pid, signal.SIGKILL)
            self.kills += 1

    def mismatches(self) -> list[tuple]:
        out = []
        for rnd, text, finish, want_text, want_finish in self.results:
            same_finish = finish.reason == want_finish.reason and (
                finish.reason not in ("stop", "error") or (finish.matched, finish.message) == (want_finish.matched, want_finish.message)
            )
            if text != want_text or not same_finish:
                out.append((rnd, text, finish, want_text, want_finish))
        return out
