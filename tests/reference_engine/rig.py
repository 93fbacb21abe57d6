"""An engine, a real detok pool and a frontend's delta receiver in the test's thread: the engine
steps and the receiver takes deltas in turn, so a test waits on conditions, never on time."""

from __future__ import annotations

import itertools
import time

import zmq

from detok.pool.pool import DetokPool
from detok.receiver.receiver import DeltaReceiver, RequestStream
from detok.wire.params import DecodeParams
from detok.wire.to_scheduler import Abort, GenerateRequest
from reference_engine.engine import Engine
from reference_engine.limits import EngineLimits
from reference_engine.model import LlamaModel

DEADLINE_S = 120.0
_rids = itertools.count(1)


class EngineRig:
    def __init__(self, pool: DetokPool, model: LlamaModel, eos_ids: frozenset[int],
                 limits: EngineLimits = EngineLimits()) -> None:
        self.ctx = zmq.Context()
        self.client = pool.client(context=self.ctx)
        # the workers reach a new client at their next reconnect (backed off up to a second by the
        # earlier test's client): a stop notice sent before that would arrive steps late
        assert self.client.wait_for_workers(DEADLINE_S), "the workers never reached the new client"
        self.engine = Engine(model, self.client, eos_ids, limits, record=1000)
        self.receiver = DeltaReceiver()
        self.texts: dict[int, list[str]] = {}
        self.finishes: dict[int, object] = {}
        self.logprobs: dict[int, list[object]] = {}
        self.streams: dict[int, RequestStream] = {}

    def request(self, prompt_ids: list[int], max_tokens: int = 8, temperature: float = 0.0, seed: int | None = 0,
                logprobs: int | None = None, ignore_eos: bool = False, **params: object) -> GenerateRequest:
        return GenerateRequest(next(_rids), list(prompt_ids), DecodeParams(**params), max_tokens,  # type: ignore[arg-type]
                               self.receiver.endpoint, seed=seed, temperature=temperature, logprobs=logprobs,
                               ignore_eos=ignore_eos)

    def submit(self, request: GenerateRequest) -> int:
        self.streams[request.rid] = self.receiver.open(request.rid)
        self.texts[request.rid] = []
        self.logprobs[request.rid] = []
        self.engine.handle(request)
        return request.rid

    def abort(self, rid: int) -> None:
        self.receiver.discard(rid)
        self.engine.handle(Abort(rid))

    def pump(self, step: bool = True) -> None:
        """Step the engine (if asked; an idle engine's client still takes its notices), then take
        the deltas that arrived. Not stepping never touches the client: its stop notices stay
        for the engine's next step."""
        if step and self.engine.idle:
            self.client.poll()
        elif step:
            self.engine.step()
        self.receiver.poll_blocking(0.005)
        for rid, stream in list(self.streams.items()):
            delta = stream.take()
            while delta is not None:
                self.texts[rid].append(delta.text)
                if delta.logprobs is not None:
                    self.logprobs[rid].append(delta.logprobs)
                if delta.finish is not None:
                    self.finishes[rid] = delta.finish
                    del self.streams[rid]
                    break
                delta = stream.take()

    def run_until(self, done, deadline_s: float = DEADLINE_S, step: bool = True) -> None:  # type: ignore[no-untyped-def]
        end = time.monotonic() + deadline_s
        while not done():
            assert time.monotonic() < end, "timed out waiting for the engine"
            self.pump(step)

    def run_lockstep(self, rid: int) -> None:
        """One request, one step at a time: after each step, wait (not on time: on the delta) until
        its text grew or it finished, so the worker is never more than the step in flight behind."""
        while rid not in self.finishes:
            seen = len(self.text(rid))
            assert self.engine.step() == 1 or rid in self.finishes
            self.run_until(lambda: len(self.text(rid)) > seen or rid in self.finishes, step=False)
        self.run_until(lambda: self.engine.idle)

    def run_all(self, rids: list[int]) -> None:
        self.run_until(lambda: all(r in self.finishes for r in rids) and self.engine.idle)

    def text(self, rid: int) -> str:
        return "".join(self.texts[rid])

    def close(self) -> None:
        self.receiver.close()
        self.client.close()
        self.ctx.term()
