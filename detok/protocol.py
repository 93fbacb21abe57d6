"""Wire messages between the frontend, the scheduler, the detok workers and the pool supervisor.

Every message is a msgspec Struct encoded as msgpack (`array_like=True`: a message is a msgpack
array, field names never travel). Each socket carries one tagged union and is read with one typed
decoder made by the `*_decoder()` functions below; there is no pickle anywhere.

Sockets and their unions (DESIGN.md §1, §2):

    frontend  -> scheduler   SchedulerRequest = GenerateRequest | Abort
    scheduler -> worker      WorkerInbound    = DetokBatch | FailRequests | Replay
    worker    -> frontend    FrontendInbound  = DeltaBatch
    worker, supervisor -> scheduler client    SchedulerNotice = StopNotice | WorkerEvent | WorkerStatus
    worker    -> supervisor  SupervisorInbound = WorkerLoaded | WorkerReady | WorkerStartFailed
                                                 | WorkerHeartbeat
    supervisor -> worker     SupervisorCommand = AssignSlot | StopWorker
                             (both directions over each worker process's private pipe)

Request ids (`rid`) are unsigned 63-bit integers made by the frontend (unique across frontends,
e.g. a frontend index in the high bits and a counter below): they hash, compare and encode far
cheaper than strings on the hot path.

Idempotence (DESIGN.md §5): token `start` offsets go in (index of a rid's first token of this batch
within its output), char `offset`s come out (index of a delta's first char within the request's
text), so a replay to a restarted worker can be de-duplicated on both sides.

Replay (exact recovery from a worker's death): a worker process that may have lost state (a
replacement, or a standalone worker) announces itself with `WorkerStatus(synced=False)` and drops
token batches until a `Replay` for its `instance` arrives; the scheduler client answers with every
request of that shard (registrations, all token ids from start 0, scheduler ends). Nothing the
worker dropped is lost: the replay holds everything sent before it, and everything after it
follows it in the same ordered channel (see detok/client.py, detok/replay_journal.py).

The integer columns of `DetokBatch` (rids, starts, counts, token ids) and of `DeltaBatch` (rids,
lengths, offsets) are packed little-endian arrays (`detok.packing`). Measured on this machine for
1024 ids of the Llama-3 vocabulary: 4 bytes per token id against 5 for msgpack ints above 65535;
encoding from a numpy array 2x faster than msgpack lists of ints (7 against 17 us), decoding to
Python ints no slower (53 against 64 us) - and a real scheduler already holds its ids and rids in
arrays, which it can shard and send without a Python loop. A `DeltaBatch`'s texts are one UTF-8
blob with per-row char lengths rather than a list of str: the worker's compiled step writes it
without a Python object per row, and msgpack carries it as one bin field (see `detok.packing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

from detok.packing import join_texts, pack_rids, pack_u32, split_text, unpack_rids, unpack_u32
from detok.stream.decode_stream import (
    CONTEXT_TOKENS,  # prompt tail ids a registration carries
)
from detok.stream.params import DecodeParams, Finish, FinishReason

pack_tokens = pack_u32
unpack_tokens = unpack_u32

SchedulerEndReason = Literal["stop", "length", "abort", "error"]
# Alternatives per token a worker turns into strings (OpenAI's chat top_logprobs allows 0-20,
# completions' logprobs 0-5; vLLM's default max_logprobs is 20). A batch with more is malformed.
MAX_TOP_LOGPROBS = 20


# ---------------------------------------------------------------------------------------------
# frontend -> scheduler
# ---------------------------------------------------------------------------------------------
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


class Abort(msgspec.Struct, tag="abort", array_like=True, gc=False, frozen=True):
    """The client went away (or asked to stop): the scheduler stops generating `rid`."""

    rid: int


SchedulerRequest = GenerateRequest | Abort


# ---------------------------------------------------------------------------------------------
# scheduler -> worker
# ---------------------------------------------------------------------------------------------
class Registration(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """A request's decode state: sent in the same ordered channel as its tokens, so it is always
    handled before them. `context` is the prompt tail (last `CONTEXT_TOKENS` prompt ids)."""

    rid: int
    reply_to: str
    context: list[int]
    params: DecodeParams
    ignore_eos: bool = False
    # None: no logprobs; k >= 0: the sampled token's logprob and up to k alternatives per token
    # (the worker keeps at most MAX_TOP_LOGPROBS; a negative k counts as None)
    logprobs: int | None = None


class EndRequest(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """The scheduler ended a request (eos / stop token, length, abort, or an error it names in
    `message`); applied after the tokens of the same batch. `matched` is the stop token id for
    reason "stop"."""

    rid: int
    reason: SchedulerEndReason
    matched: int | None = None
    message: str | None = None


class StepLogprobs(msgspec.Struct, array_like=True, gc=False):
    """The logprobs of some rows of a DetokBatch (those of requests that asked), packed: float32
    and uint32 little-endian columns. The tokens of the listed rows, in batch order, each have a
    sampled logprob and `top_counts[t]` alternatives, taken in order from the flattened `top_ids`
    / `top_logprobs` (the scheduler's top-k, most likely first)."""

    rows: bytes  # uint32 per listed row: its index among the batch's rows, ascending
    sampled: bytes  # float32 per token of the listed rows: the sampled token's logprob
    top_counts: bytes  # uint32 per token of the listed rows
    top_ids: bytes  # uint32, flattened
    top_logprobs: bytes  # float32, flattened


class DetokBatch(msgspec.Struct, tag="batch", array_like=True, gc=False):
    """One scheduler step for one worker, columnar; integer columns are packed little-endian arrays
    (`pack_rids` / `pack_u32`) so a scheduler holding numpy arrays sends them without a Python loop.

    `rids[i]` gets `counts[i]` tokens (all 1 when `counts` is empty, the common non-speculative
    case) taken in order from the flattened `tokens`; `starts[i]` is the index of its first token
    of this batch within the request's output.
    """

    seq: int  # per-worker message number, for gap detection and logs
    sent_at: float  # scheduler's time.time() at send: queue lag and end-to-end latency
    new: list[Registration]
    rids: bytes  # uint64 per rid
    starts: bytes  # uint32 per rid
    counts: bytes  # uint32 per rid, or empty: one token each
    tokens: bytes  # uint32 token ids, flattened
    ends: list[EndRequest]
    logprobs: StepLogprobs | None = None  # None: no row of this step carries logprobs


class FailRequests(msgspec.Struct, tag="fail", array_like=True, gc=False):
    """Finish these rids with reason "error" and `message`, telling each one's frontend; any state
    the worker holds for them is freed. Used by the scheduler client when a worker died or lost a
    registration; carries `reply_to` because the receiving worker may never have seen the rid."""

    rids: list[int]
    reply_to: list[str]
    message: str


class Replay(msgspec.Struct, tag="replay", array_like=True, gc=False):
    """Scheduler client -> worker: the whole state of the worker's shard, for the process named by
    `instance` (0: whichever process receives it - a new client resetting the shard). `batch` holds
    the registration of every request to rebuild, all of its token ids so far (one row per rid,
    start 0) and the scheduler's ends of those that ended. Authoritative: a live request the worker
    holds that is not in it is finished with an error (its client no longer knows it)."""

    instance: int
    batch: DetokBatch
    reason: str = ""  # why the replay was sent, for logs


WorkerInbound = DetokBatch | FailRequests | Replay


# ---------------------------------------------------------------------------------------------
# worker -> frontend
# ---------------------------------------------------------------------------------------------
class RequestFinished(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """A request ended; `num_tokens` is how many output tokens the worker consumed for it."""

    rid: int
    finish: Finish
    num_tokens: int


class DeltaLogprobs(msgspec.Struct, array_like=True, gc=False):
    """Logprob entries of one worker batch for one frontend, packed. An entry-row is a run of
    consecutive output tokens of one request: `counts[r]` entries from token number `firsts[r]`
    (a receiver that already has some of them drops those: replay de-duplication). Per entry, in
    row order: the sampled id and logprob and `top_counts[e]` alternatives (ids and logprobs
    flattened). `text` holds the OpenAI token strings in UTF-8, every entry's first, then every
    alternative's, with `lengths` in chars; `raw` lists (uint32, ascending) the strings that name
    bytes which are not whole UTF-8 characters (`bytes:\\xe5\\x8c`, OpenAI's form).
    `detok.token_logprobs.split_logprobs` gives the per-request entries."""

    rids: bytes  # uint64 per entry-row
    firsts: bytes  # uint32 per entry-row: output token index of its first entry
    counts: bytes  # uint32 per entry-row
    token_ids: bytes  # uint32 per entry
    logprobs: bytes  # float32 per entry
    top_counts: bytes  # uint32 per entry
    top_ids: bytes  # uint32, flattened
    top_logprobs: bytes  # float32, flattened
    text: bytes  # UTF-8 token strings
    lengths: bytes  # uint32 per string: chars
    raw: bytes = b""  # uint32 string indices


class DeltaBatch(msgspec.Struct, tag="deltas", array_like=True, gc=False):
    """Text deltas of one worker batch for one frontend, columnar. `rids` (uint64), `lengths` and
    `offsets` (uint32) are packed little-endian arrays, and `text` is every row's text in UTF-8,
    back to back (row i's text is the next `lengths[i]` chars). The worker writes these columns
    straight from its tables with no Python object per row and passes the rid column of its input
    through as it is; `texts()` / `rows()` give the per-row strings.

    `texts()[i]` starts at char `offsets[i]` of request `rids[i]`'s output text; a receiver that
    already has more chars drops the overlap (replay de-duplication). Rows with an empty text carry
    nothing (the worker sends a step's columns whole; such a row's offset is not meaningful, and
    its rid may even be unknown to the receiver). `finished` entries apply after the texts of the
    same message. `sent_at` echoes the DetokBatch's scheduler send time.
    """

    worker: int
    sent_at: float
    rids: bytes  # uint64 per row
    text: bytes  # UTF-8, every row's text back to back
    lengths: bytes  # uint32 per row: chars of the row's text
    offsets: bytes  # uint32 per row
    finished: list[RequestFinished]
    logprobs: DeltaLogprobs | None = None  # entries of requests that asked; applied before `finished`

    @classmethod
    def from_rows(
        cls, worker: int, sent_at: float, rids: Iterable[int], texts: Sequence[str], offsets: Iterable[int],
        finished: Iterable[RequestFinished] = (),
    ) -> DeltaBatch:
        """A DeltaBatch from per-row Python values (tests, hand-made messages)."""
        text, lengths = join_texts(texts)
        return cls(worker, sent_at, pack_rids(rids), text, lengths, pack_u32(offsets), list(finished))

    def texts(self) -> list[str]:
        """The per-row texts; ValueError if `text` and `lengths` do not fit together."""
        return split_text(self.text, self.lengths)

    def rows(self) -> zip[tuple[int, str, int]]:
        """(rid, text, offset) per row, as Python objects; ValueError if the columns do not fit."""
        rids, texts, offsets = unpack_rids(self.rids), self.texts(), unpack_u32(self.offsets)
        if not len(rids) == len(texts) == len(offsets):
            raise ValueError(f"{len(rids)} rids, {len(texts)} texts and {len(offsets)} offsets")
        return zip(rids.tolist(), texts, offsets.tolist())


FrontendInbound = DeltaBatch


# ---------------------------------------------------------------------------------------------
# worker / supervisor -> scheduler client
# ---------------------------------------------------------------------------------------------
class StopNotice(msgspec.Struct, tag="stop", array_like=True, gc=False):
    """Rids the worker finished on its own (stop string, stop token, invalid id, idle timeout,
    token gap): their frontends were told; the scheduler stops generating them and ignores them
    from then on. `unknown_rids` got tokens or an end but no registration reached this worker:
    their frontends were NOT told (the worker does not know them); the scheduler client, which
    holds the registrations, has them finished with an error (never after a replay, which carries
    every registration of the shard)."""

    worker: int
    rids: list[int]
    finishes: list[Finish]
    unknown_rids: list[int] = []


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


# ---------------------------------------------------------------------------------------------
# worker process <-> supervisor (the process's private pipe)
# ---------------------------------------------------------------------------------------------
class WorkerLoaded(msgspec.Struct, tag="loaded", array_like=True, gc=False, frozen=True):
    """A worker process loaded its tokenizer and waits for a slot (a spare, until assigned)."""

    pid: int
    strategy: str  # decode strategy chosen for the tokenizer ("bytes" or "window")
    load_seconds: float


class AssignSlot(msgspec.Struct, tag="assign", array_like=True, gc=False, frozen=True):
    """Supervisor -> worker process: serve slot `worker` (bind `endpoint`)."""

    worker: int
    endpoint: str
    generation: int  # 1 at pool start, +1 per restart of the slot
    restart_cause: str = ""  # why the previous process of this slot died
    died_at: float = 0.0  # wall clock when the previous process was seen dead (recovery time)


class StopWorker(msgspec.Struct, tag="stop_worker", array_like=True, gc=False, frozen=True):
    """Supervisor -> worker process: the pool is closing; drain, finish what is live, exit. (A pipe
    that closes without this message means the pool died: the worker then also removes the pool's
    ipc directory.)"""

    reason: str = "pool closing"


SupervisorCommand = AssignSlot | StopWorker


class WorkerReady(msgspec.Struct, tag="ready", array_like=True, gc=False, frozen=True):
    worker: int
    pid: int
    endpoint: str  # the input endpoint actually bound (tcp wildcard port resolved)


class WorkerStartFailed(msgspec.Struct, tag="start_failed", array_like=True, gc=False, frozen=True):
    pid: int
    error: str


class WorkerHeartbeat(msgspec.Struct, tag="heartbeat", array_like=True, gc=False, frozen=True):
    """A serving worker's main loop is running (sent every `HEARTBEAT_INTERVAL_S`): a process that
    is alive but stuck (SIGSTOP, a hung call) stops sending it and the supervisor replaces it."""

    pid: int


SupervisorInbound = WorkerLoaded | WorkerReady | WorkerStartFailed | WorkerHeartbeat


# ---------------------------------------------------------------------------------------------
# codecs
# ---------------------------------------------------------------------------------------------
def new_encoder() -> msgspec.msgpack.Encoder:
    """An encoder for one socket owner; keep it and reuse it (it reuses its buffer)."""
    return msgspec.msgpack.Encoder()


def scheduler_request_decoder() -> msgspec.msgpack.Decoder[GenerateRequest | Abort]:
    return msgspec.msgpack.Decoder(SchedulerRequest)


def worker_inbound_decoder() -> msgspec.msgpack.Decoder[DetokBatch | FailRequests | Replay]:
    return msgspec.msgpack.Decoder(WorkerInbound)


def frontend_inbound_decoder() -> msgspec.msgpack.Decoder[DeltaBatch]:
    return msgspec.msgpack.Decoder(FrontendInbound)


def scheduler_notice_decoder() -> msgspec.msgpack.Decoder[StopNotice | WorkerEvent | WorkerStatus]:
    return msgspec.msgpack.Decoder(SchedulerNotice)


def supervisor_inbound_decoder() -> msgspec.msgpack.Decoder[
    WorkerLoaded | WorkerReady | WorkerStartFailed | WorkerHeartbeat
]:
    return msgspec.msgpack.Decoder(SupervisorInbound)


def supervisor_command_decoder() -> msgspec.msgpack.Decoder[AssignSlot | StopWorker]:
    return msgspec.msgpack.Decoder(SupervisorCommand)


def registration_for(request: GenerateRequest) -> Registration:
    """The worker registration of a frontend request (the prompt tail as decode context)."""
    return Registration(
        rid=request.rid,
        reply_to=request.reply_to,
        context=request.prompt_ids[-CONTEXT_TOKENS:],
        params=request.params,
        ignore_eos=request.ignore_eos,
        logprobs=request.logprobs,
    )


__all__ = [
    "CONTEXT_TOKENS",
    "Abort",
    "AssignSlot",
    "DecodeParams",
    "MAX_TOP_LOGPROBS",
    "DeltaBatch",
    "DeltaLogprobs",
    "DetokBatch",
    "EndRequest",
    "FailRequests",
    "Finish",
    "FinishReason",
    "FrontendInbound",
    "GenerateRequest",
    "Registration",
    "Replay",
    "RequestFinished",
    "SchedulerNotice",
    "SchedulerRequest",
    "StepLogprobs",
    "StopNotice",
    "StopWorker",
    "SupervisorCommand",
    "SupervisorInbound",
    "WorkerEvent",
    "WorkerHeartbeat",
    "WorkerInbound",
    "WorkerLoaded",
    "WorkerReady",
    "WorkerStartFailed",
    "WorkerStatus",
    "frontend_inbound_decoder",
    "join_texts",
    "new_encoder",
    "pack_rids",
    "pack_tokens",
    "pack_u32",
    "registration_for",
    "scheduler_notice_decoder",
    "scheduler_request_decoder",
    "split_text",
    "supervisor_command_decoder",
    "supervisor_inbound_decoder",
    "unpack_rids",
    "unpack_tokens",
    "unpack_u32",
    "worker_inbound_decoder",
]
