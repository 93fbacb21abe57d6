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
from detok.api.errors import RequestError
from detok.api.outbox import Outbox
from detok.api.validation import GenerationJob
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import Abort, AbortRange, GenerateRequest
from detok.receiver.receiver import DeltaReceiver, RequestStream

_RID_COUNTER_BITS = 48  # rids: a frontend id above a per-frontend counter (63 bits in all)
_RID_GENERATION_BITS = 7  # `detok serve --frontends N`: index (8 bits) | restart generation (7) | counter
MAX_FRONTENDS = 1 << (63 - _RID_COUNTER_BITS - _RID_GENERATION_BITS)
_QUEUE_FULL = "the scheduler is not taking requests (its queue is full); retry later"


def rid_base(index: int, generation: int) -> int:
    """The rid space of frontend process `index` in its `generation`-th start: distinct between
    the frontends of one stack, and from the rids a restarted frontend's predecessor left running."""
    if not 0 <= index < MAX_FRONTENDS:
        raise ValueError(f"frontend index must be in [0, {MAX_FRONTENDS}), got {index}")
    generation %= 1 << _RID_GENERATION_BITS
    return (index << (_RID_COUNTER_BITS + _RID_GENERATION_BITS)) | (generation << _RID_COUNTER_BITS)


def rid_range(index: int, generation: int) -> tuple[int, int]:
    """[first, end): every rid frontend `index` can make in its `generation`-th start."""
    first = rid_base(index, generation)
    return first, first + (1 << _RID_COUNTER_BITS)


class RangeAborter:
    """The frontend supervisor's wire to the scheduler: when a frontend process dies, every rid of
    its rid space is aborted (one `AbortRange`), so its requests stop generating and the workers
    free them, instead of running to `max_tokens` for clients that are gone. The socket is made on
    first use, in the thread that uses it (the supervisor's watcher)."""

    def __init__(self, scheduler_endpoint: str, *, keys: CurveKeys | str | os.PathLike[str] | None = None,
                 insecure: bool = False) -> None:
        self._endpoint = scheduler_endpoint
        self._security = SocketSecurity(keys, insecure)
        self._security.check(scheduler_endpoint)
        self._ctx: zmq.Context | None = None
        self._push: zmq.Socket | None = None
        self._encoder = new_encoder()

    def abort(self, index: int, generation: int) -> bool:
        """Abort frontend `index`'s rids of `generation`; False if the scheduler's queue is full
        (its requests then end on their own, at `max_tokens`)."""
        if self._push is None:
            self._ctx = zmq.Context()
            self._push = make_socket(self._ctx, zmq.PUSH, hwm=1000)
            self._security.connect(self._push, self._endpoint)
        try:
            self._push.send(self._encoder.encode(AbortRange(*rid_range(index, generation))), zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def close(self) -> None:
        """Close the socket (bounded linger: a last abort still goes), then the context. Idempotent."""
        if self._push is not None and not self._push.closed:
            self._push.close()
            self._security.close()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


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
        self._outbox = Outbox(self._push, self._unsent)  # (a turn's messages sent in one run)
        self._encoder = new_encoder()
        # unique across frontends sharing a scheduler: given (`rid_base`), or random without coordination
        self._rid_base = secrets.randbits(63 - _RID_COUNTER_BITS) << _RID_COUNTER_BITS if base is None else base
        self._counter = itertools.count(1)
        # tool-call ids: this salt and the rid (so ids differ across restarts, and a replay, which
        # carries the same registration, gives the same ones)
        self._call_salt = secrets.token_hex(6)

    def _new_rid(self) -> int:
        return self._rid_base | (next(self._counter) & ((1 << _RID_COUNTER_BITS) - 1))

    def _unsent(self, rid: int) -> None:
        self.receiver.fail(rid, _QUEUE_FULL)

    def submit(self, job: GenerationJob, arrival_time: float | None = None) -> list[RequestStream]:
        """Send a request's choices to the scheduler (one GenerateRequest each, own rid and seed);
        their deltas arrive on the returned streams. Nothing stays open if this raises."""
        streams: list[RequestStream] = []
        sent: list[int] = []
        arrival = arrival_time or time.time()
        outbox = self._outbox
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
                    logprobs=job.scheduler_logprobs,
                    parsing=(msgspec.structs.replace(job.parsing, call_id_seed=f"{self._call_salt}-{rid:x}")
                             if job.parsing is not None else None),
                    extras=job.extras,
                    logprobs_form=job.logprobs_form,
                )
                if not (outbox.can_send() and outbox.put(self._encoder.encode(request), rid)):
                    raise RequestError(_QUEUE_FULL, status=503, type="service_unavailable")
                sent.append(rid)
        except BaseException:
            for stream in streams:
                self.receiver.discard(stream.rid)
            taken_back = outbox.retract(set(sent))  # (queued this turn: they never leave)
            for rid in sent:  # the choices that did reach the scheduler stop there too
                if rid not in taken_back:
                    outbox.put(self._encoder.encode(Abort(rid)))
            raise
        return streams

    def abort(self, rid: int) -> None:
        """The client went away: stop generating (the scheduler tells the worker) and forget it."""
        self.receiver.discard(rid)
        self._outbox.put(self._encoder.encode(Abort(rid)))  # best effort: if the queue is full it ends on its own

    def close(self) -> None:
        """Close the socket (bounded linger), then the authenticator, then the context. Idempotent."""
        if self._push.closed:
            return
        self._outbox.flush()  # (what the last turn queued: an abort, a request)
        self._push.close()
        self._security.close()
        self._ctx.term()

    def __enter__(self) -> SchedulerLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
