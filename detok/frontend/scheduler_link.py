"""The frontend's two wires: GenerateRequest / Abort to the scheduler, text deltas back from the
detok workers (a `DeltaReceiver` whose endpoint travels as each request's `reply_to`)."""

from __future__ import annotations

import itertools
import os
import secrets
import time

import msgspec
import zmq

from detok.wire.endpoints import make_socket
from detok.wire.security import CurveKeys, SocketSecurity
from detok.frontend.errors import RequestError
from detok.frontend.validation import GenerationJob
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import Abort, GenerateRequest
from detok.receiver.receiver import DeltaReceiver, RequestStream

_RID_COUNTER_BITS = 48  # rids: a frontend id above a per-frontend counter (63 bits in all)
_RID_GENERATION_BITS = 7  # `detok serve --frontends N`: index (8 bits) | restart generation (7) | counter
MAX_FRONTENDS = 1 << (63 - _RID_COUNTER_BITS - _RID_GENERATION_BITS)


def rid_base(index: int, generation: int) -> int:
    """The rid space of frontend process `index` in its `generation`-th start: distinct between
    the frontends of one stack, and from the rids a restarted frontend's predecessor left running."""
    if not 0 <= index < MAX_FRONTENDS:
        raise ValueError(f"frontend index must be in [0, {MAX_FRONTENDS}), got {index}")
    generation %= 1 << _RID_GENERATION_BITS
    return (index << (_RID_COUNTER_BITS + _RID_GENERATION_BITS)) | (generation << _RID_COUNTER_BITS)


class SchedulerLink:
    def __init__(self, scheduler_endpoint: str, receiver: DeltaReceiver, hwm: int = 100_000,
                 base: int | None = None, *, keys: CurveKeys | str | os.PathLike[str] | None = None,
                 insecure: bool = False) -> None:
        """Connect to the scheduler's request inbox. A tcp endpoint (a frontend on another host than
        the scheduler) needs the deployment's CURVE `keys`, or an explicit `insecure=True`."""
        self._security = SocketSecurity(keys, insecure)
        self._security.check(scheduler_endpoint)
        self._ctx = zmq.Context()
        self._push = make_socket(self._ctx, zmq.PUSH, hwm=hwm)
        self._security.connect(self._push, scheduler_endpoint)
        self.receiver = receiver
        self._encoder = new_encoder()
        # unique across frontends sharing a scheduler: given (`rid_base`), or random without coordination
        self._rid_base = secrets.randbits(63 - _RID_COUNTER_BITS) << _RID_COUNTER_BITS if base is None else base
        self._counter = itertools.count(1)
        # tool-call ids: this salt and the rid (so ids differ across restarts, and a replay, which
        # carries the same registration, gives the same ones)
        self._call_salt = secrets.token_hex(6)

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
                    parsing=(msgspec.structs.replace(job.parsing, call_id_seed=f"{self._call_salt}-{rid:x}")
                             if job.parsing is not None else None),
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
        """Close the socket (bounded linger), then the authenticator, then the context. Idempotent."""
        if self._push.closed:
            return
        self._push.close()
        self._security.close()
        self._ctx.term()

    def __enter__(self) -> SchedulerLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
