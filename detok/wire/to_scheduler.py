"""What reaches the scheduler: requests from frontends, and notices from workers and the supervisor.

    frontend  -> scheduler                 SchedulerRequest = GenerateRequest | Abort | AbortRange
    worker, supervisor -> scheduler client SchedulerNotice  = StopNotice | WorkerEvent | WorkerStatus

Request ids (`rid`) are unsigned 63-bit integers made by the frontend (unique across frontends,
e.g. a frontend index in the high bits and a counter below): they hash, compare and encode far
cheaper than strings on the hot path.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from detok.parsing.types import OutputParsing
from detok.wire.params import DecodeParams, Finish

# frontend -> scheduler
class SamplingExtras(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """vLLM's sampling knobs beyond temperature / top-p / top-k, for a scheduler that samples (the
    reference engine applies them in vLLM v1's order; the stub replays text and has none to
    apply). `logit_bias`: (token id, bias) pairs, each bias within +-100; `allowed_token_ids`: the
    only ids that may be sampled (empty: any); `bad_words`: id sequences whose last id is banned
    wherever the output so far ends with the others (the frontend tokenized the words, as vLLM's
    `SamplingParams.update_from_tokenizer`)."""

    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_token_ids: tuple[int, ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()


# "entries": token strings and floats per entry (any frontend formats them); "chat": each entry
# rendered by its worker as the item of OpenAI's chat `logprobs.content` (detok.worker.chat_entries)
LogprobsForm = Literal["entries", "chat"]


class GenerateRequest(msgspec.Struct, tag="generate", array_like=True, gc=False, frozen=True):
    """A new request from a frontend. `reply_to` is the frontend's DeltaBatch endpoint."""

    rid: int
    prompt_ids: list[int]
    params: DecodeParams
    max_tokens: int
    reply_to: str
    seed: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False
    arrival_time: float = 0.0  # frontend's time.time() at arrival, for end-to-end latency
    logprobs: int | None = None
    top_k: int = -1  # <= 0: no top-k (vLLM's -1 and 0)
    # reasoning / tool-call parsing of the output, done by the worker (None: plain text); last, so
    # older senders still decode. The scheduler only carries it into the registration.
    parsing: OutputParsing | None = None
    # the other sampling knobs (None: vLLM's defaults); last, so older senders still decode
    extras: SamplingExtras | None = None
    # how the workers send the logprob entries (see LogprobsForm); the scheduler only carries it
    # into the registration. Last, so older senders still decode.
    logprobs_form: LogprobsForm = "entries"


class Abort(msgspec.Struct, tag="abort", array_like=True, gc=False, frozen=True):
    """The client went away (or asked to stop): the scheduler stops generating `rid`."""

    rid: int


class AbortRange(msgspec.Struct, tag="abort_range", array_like=True, gc=False, frozen=True):
    """Every rid in [`first`, `end`) stops: the rid space of a frontend process that died (sent
    by its supervisor, `detok serve --frontends N`; its clients are gone with it). The scheduler
    also refuses, for a while, requests in that range still on their way from the dead process.
    A new tag: an older scheduler drops it as malformed (its requests then run to `max_tokens`,
    as before)."""

    first: int
    end: int


SchedulerRequest = GenerateRequest | Abort | AbortRange


def scheduler_request_decoder() -> msgspec.msgpack.Decoder[GenerateRequest | Abort | AbortRange]:
    return msgspec.msgpack.Decoder(SchedulerRequest)


# worker / supervisor -> scheduler client
class StopNotice(msgspec.Struct, tag="stop", array_like=True, gc=False):
    """Rids the worker finished on its own (stop string, stop token, invalid id, idle timeout,
    token gap): their frontends were told; the scheduler stops generating them and ignores them
    from then on. `unknown_rids` got tokens or an end but no registration reached this worker:
    their frontends were NOT told (the worker does not know them); the scheduler client, which
    holds the registrations, has them finished with an error (never after a replay, which carries
    every registration of the shard). `gens[i]` is the registration generation of `rids[i]`, and
    `seq` the last DetokBatch the worker had handled: the client applies a notice only to the
    registration it is about (a rid may have been registered again since)."""

    worker: int
    rids: list[int]
    finishes: list[Finish]
    unknown_rids: list[int] = []
    gens: list[int] = []
    seq: int = 0


WorkerEventKind = Literal["ready", "died"]


class WorkerEvent(msgspec.Struct, tag="worker", array_like=True, gc=False, frozen=True):
    """Supervisor news about a worker. "died": its process is gone (`message` names the cause; the
    slot's next process asks for its shard's replay); "ready": a process serves the slot again."""

    worker: int
    kind: WorkerEventKind
    pid: int
    generation: int  # how many times this worker slot was started, from 1
    message: str = ""


class WorkerStatus(msgspec.Struct, tag="status", array_like=True, gc=False, frozen=True):
    """Worker -> scheduler client, a few times a second: liveness, progress and replay requests.

    `instance` is random per worker process. `synced` False: the process holds no state it can trust
    and drops token batches until a `Replay` for this instance arrives (the client answers with
    one). `seq` is the last `DetokBatch.seq` it handled: everything up to it was processed and its
    deltas handed to the frontend sockets (the client keeps ended requests for replay until then).
    `died_at` (wall clock, 0 if unknown) is when the previous process of this slot was seen dead."""

    worker: int
    instance: int
    synced: bool
    seq: int
    pid: int
    generation: int = 0
    died_at: float = 0.0


SchedulerNotice = StopNotice | WorkerEvent | WorkerStatus


def scheduler_notice_decoder() -> msgspec.msgpack.Decoder[StopNotice | WorkerEvent | WorkerStatus]:
    return msgspec.msgpack.Decoder(SchedulerNotice)
