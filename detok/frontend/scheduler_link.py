"""The frontend's two wires: GenerateRequest / Abort to the scheduler, text deltas back from the
detok workers (a `DeltaReceiver` whose endpoint travels as each request's `reply_to`)."""

from __future__ import annotations

import itertools
import secrets
import time

import zmq

from detok.wire.endpoints import make_socket
from detok.frontend.errors import RequestError
from detok.frontend.validation import GenerationJob
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import Abort, GenerateRequest
from detok.receiver.receiver import DeltaReceiver, RequestStream

_RID_COUNTER_BITS = 48  # rids: a random frontend id above a per-frontend counter (63 bits in all)


class SchedulerLink:
    def __init__(self, scheduler_endpoint: str, receiver: DeltaReceiver, hwm: int = 100_000) -> None:
        self._ctx = zmq.Context()
        self._push = make_socket(self._ctx, zmq.PUSH, hwm=hwm)
        self._push.connect(scheduler_endpoint)
        self.receiver = receiver
        self._encoder = new_encoder()
        # unique across frontends sharing a scheduler without coordination
        self._rid_base = secrets.randbits(63 - _RID_COUNTER_BITS) << _RID_COUNTER_BITS
        self._counter = itertools.count(1)

    def _new_rid(self) -> int:
        return self._rid_base | (next(self._counter) & ((1 << _RID_COUNTER_BITS) - 1))

    def _send(self, message: GenerateRequest | Abort) -> bool:
        try:
            self._push.send(self._encoder.encode(message), zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def submit(self, job: GenerationJob, arrival_time: float | None = None) -> list[RequestStream]:
        """Send a request's choices to the scheduler (one GenerateRequest each, own rid and seed);
        their deltas arrive on the returned streams. Nothing stays open if this raises."""
        streams: list[RequestStream] = []
        sent: list[int] = []
        arrival = arrival_time or time.time()
        try:
            for seed in job.choice_seeds():
                rid = self._new_rid()
                streams.append(self.receiver.open(rid))  # before sending: the first delta must find it
                request = GenerateRequest(
                    rid=rid,
                    prompt_ids=job.prompt_ids,
                    params=job.params,
                    max_tokens=job.max_tokens,
                    reply_to=self.receiver.endpoint,
                    seed=seed,
                    temperature=job.temperature,
                    top_p=job.top_p,
                    top_k=job.top_k,
                    ignore_eos=job.ignore_eos,
                    arrival_time=arrival,
                    logprobs=job.logprobs,
                )
                if not self._send(request):
                    raise RequestError(
                        "the scheduler is not taking requests (its queue is full); retry later",
                        status=503,
                        type="service_unavailable",
                    )
                sent.append(rid)
        except BaseException:
            for stream in streams:
                self.receiver.discard(stream.rid)
            for rid in sent:  # the choices that did reach the scheduler stop there too
                self._send(Abort(rid))
            raise
        return streams

    def abort(self, rid: int) -> None:
        """The client went away: stop generating (the scheduler tells the worker) and forget it."""
        self.receiver.discard(rid)
        self._send(Abort(rid))  # best effort: if the queue is full the request ends on its own

    def close(self) -> None:
        self._push.close()
        self._ctx.term()
