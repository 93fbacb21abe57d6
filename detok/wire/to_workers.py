"""What the scheduler (its `SchedulerClient`) sends to a worker: WorkerInbound = DetokBatch | FailRequests | Replay.

Idempotence: token `start` offsets go in (index of a rid's first token of this batch within its
output), so a replay to a restarted worker can be de-duplicated.

Replay (exact recovery from a worker's death): a worker process that may have lost state (a
replacement, or a standalone worker) announces itself with `WorkerStatus(synced=False)` and drops
token batches until a `Replay` for its `instance` arrives; the scheduler client answers with every
request of that shard (registrations, all token ids from start 0, scheduler ends). Nothing the
worker dropped is lost: the replay holds everything sent before it, and everything after it
follows it in the same ordered channel (see detok/scheduler/client.py, detok/scheduler/replay_journal.py).

The integer columns of `DetokBatch` (rids, starts, counts, token ids) are packed little-endian arrays
(`detok.wire.packing`): 4 bytes per token id against 5 for msgpack ints above 65535; encoding from a
numpy array is one copy, not an int object per id, and decoding to Python ints is no slower than
msgpack's - and a real scheduler already holds its ids and rids in arrays, which it can shard and send
without a Python loop.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from detok.parsing.types import OutputParsing
from detok.wire.params import CONTEXT_TOKENS, DecodeParams
from detok.wire.packing import pack_u32, unpack_u32
from detok.wire.to_scheduler import GenerateRequest, LogprobsForm

pack_tokens = pack_u32
unpack_tokens = unpack_u32

SchedulerEndReason = Literal["stop", "length", "abort", "error"]
# Alternatives per token a worker turns into strings (chat's top_logprobs and completions' logprobs
# allow 0-20, vLLM's default max_logprobs). A batch with more is malformed.
MAX_TOP_LOGPROBS = 20


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
    # Which registration of `rid` this is (set by the SchedulerClient, unique per client; 0: not
    # set). A rid may be used again once its request finished: finishes, notices and replays carry
    # the generation, so nothing of the earlier request can touch the later one.
    gen: int = 0
    # reasoning / tool-call parsing (detok.parsing): None is plain text on the compiled path. Last,
    # so registrations of older senders still decode. Bounded by detok.parsing.limits (a
    # registration past them finishes that request with an error, never the worker).
    parsing: OutputParsing | None = None
    # how its logprob entries are sent (detok.wire.to_scheduler.LogprobsForm); last, as above
    logprobs_form: LogprobsForm = "entries"


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


def worker_inbound_decoder() -> msgspec.msgpack.Decoder[DetokBatch | FailRequests | Replay]:
    return msgspec.msgpack.Decoder(WorkerInbound)


def registration_for(request: GenerateRequest) -> Registration:
    """The worker registration of a frontend request (the prompt tail as decode context)."""
    return Registration(
        rid=request.rid,
        reply_to=request.reply_to,
        context=request.prompt_ids[-CONTEXT_TOKENS:],
        params=request.params,
        ignore_eos=request.ignore_eos,
        logprobs=request.logprobs,
        parsing=request.parsing,
        logprobs_form=request.logprobs_form,
    )
