"""The engine loop: continuous batching over the model, the detok pool driven through `SchedulerClient`.

Each step: take the workers' stop notices (stop strings, errors: the sequence is dropped at once
and its KV cache freed), admit waiting requests while the batch and KV-cache bounds allow (their
registration goes with this step), run ONE forward pass for every running sequence - one token for
those decoding, a chunk of the prompt for those prefilling (decodes first, `max_step_tokens` in
all) - sample a token for each sequence whose pending tokens are all in, apply the stop rules, and
send the step (tokens, ends, logprob columns) to the pool.

Bounds (`reference_engine.limits.EngineLimits`, listed in docs/reference-engine.md): at most `max_running` sequences run at once, the KV
caches together hold at most `kv_cache_bytes` (counted by tokens written); a request over either
waits in a queue of at most `max_waiting` (one more is finished with an error). When a decode
step would overflow the KV budget the newest sequence is preempted: its cache is freed and it
waits at the head of the queue, to be recomputed from its prompt and output so far (vLLM's
recompute preemption). A prompt that does not fit the context is finished with an error.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time

import numpy as np

from detok.scheduler.client import SchedulerClient
from detok.scheduler.step_logprobs import LogprobColumns
from detok.wire.to_scheduler import Abort, AbortRange, GenerateRequest
from detok.wire.to_workers import MAX_TOP_LOGPROBS, EndRequest
from reference_engine.limits import EngineLimits
from reference_engine.model import LlamaModel, Segment
from reference_engine.sampling import log_softmax, top_logprobs
from reference_engine.sequence import Sequence
from scheduler_stub.rid_ranges import DeadRanges, range_error
from scheduler_stub.validation import request_error, rid_error

log = logging.getLogger("reference_engine")


@dataclasses.dataclass
class EngineStats:
    steps: int = 0
    tokens: int = 0  # sampled
    prefill_tokens: int = 0
    admitted: int = 0
    finished: int = 0
    aborted: int = 0
    stopped_by_workers: int = 0
    preempted: int = 0
    rejected: int = 0
    model_s: float = 0.0  # forward passes and sampling
    decode_s: float = 0.0  # of which in steps without prefill (the steady-state rate)
    decode_tokens: int = 0
    step_s: float = 0.0  # whole steps (model, scheduler client, the engine's own bookkeeping)
    client_s: float = 0.0  # in detok's SchedulerClient: poll (notices), add_request, send_step


class Engine:
    def __init__(self, model: LlamaModel, client: SchedulerClient, eos_ids: frozenset[int],
                 limits: EngineLimits = EngineLimits(), record: int = 0) -> None:
        """`record`: keep the output ids and finish of the last `record` finished requests
        (`finished_log`), for tests and benchmarks."""
        self.model = model
        self.client = client
        self.eos_ids = eos_ids
        self.limits = limits
        self.kv_token_budget = limits.kv_cache_bytes // model.cfg.kv_bytes_per_token
        # a lone sequence always fits: the context is cut to what the KV budget holds
        self.context = min(model.cfg.context_length, self.kv_token_budget)
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: dict[int, Sequence] = {}  # in admission order
        self.stats = EngineStats()
        self.finished_log: collections.OrderedDict[int, tuple[list[int], str]] = collections.OrderedDict()
        self._record = record
        self._full_workers: list[int] = []
        self.dead_ranges = DeadRanges()

    # ---- requests in ------------------------------------------------------------------------------
    def handle(self, message: GenerateRequest | Abort | AbortRange) -> None:
        try:
            if isinstance(message, GenerateRequest):
                self.submit(message)
            elif isinstance(message, AbortRange):
                error = range_error(message)
                if error is None:
                    log.info("aborted %d requests of rids [%#x, %#x)", self.abort_range(message.first, message.end),
                             message.first, message.end)
                else:
                    log.warning("ignored an abort of a rid range: %s", error)
            elif rid_error(message.rid) is None:
                self.abort(message.rid)
        except Exception as e:  # noqa: BLE001 - one message must never stop the engine
            log.exception("reference engine: handling a %s failed", type(message).__name__)
            if isinstance(message, GenerateRequest):
                self._reject(message, f"the engine failed the request: {type(e).__name__}: {e}")

    def submit(self, request: GenerateRequest) -> None:
        error = request_error(request) or self._request_error(request)
        if error is not None:
            self._reject(request, f"the engine rejected the request: {error}")
        elif self.dead_ranges.holds(request.rid):  # its frontend died after sending it: no one waits
            self.stats.finished += 1
            self.stats.aborted += 1
        elif request.rid in self.running or any(s.rid == request.rid for s in self.waiting):
            log.warning("ignoring a second request with rid %d", request.rid)
        else:
            self.waiting.append(Sequence(request, self.eos_ids, self.context))

    def _request_error(self, r: GenerateRequest) -> str | None:
        vocab = self.model.cfg.vocab_size
        if not r.prompt_ids:
            return "the prompt is empty"
        if len(r.prompt_ids) >= self.context:
            return (f"the prompt has {len(r.prompt_ids)} tokens; this model's context is {self.context} tokens "
                    "(prompt and output together)")
        if any(not 0 <= t < vocab for t in r.prompt_ids):
            return f"the prompt holds a token id outside the vocabulary (size {vocab})"
        if r.max_tokens < 1:
            return "max_tokens must be >= 1"
        if not (r.temperature >= 0 and 0 < r.top_p <= 1):
            return f"temperature {r.temperature} / top_p {r.top_p} out of range"
        if len(self.waiting) >= self.limits.max_waiting:
            return f"the engine's queue is full ({self.limits.max_waiting} requests wait); retry later"
        return None

    def _pop_waiting(self, rid: int) -> Sequence | None:
        seq = next((s for s in self.waiting if s.rid == rid), None)
        if seq is not None:
            self.waiting.remove(seq)
        return seq

    def abort(self, rid: int) -> None:
        seq = self.running.pop(rid, None) or self._pop_waiting(rid)
        if seq is None:
            return
        if seq.registered:
            self.client.abort(rid)  # tells the worker now, so it frees the request
        seq.cache = None
        self.stats.finished += 1
        self.stats.aborted += 1

    def abort_range(self, first: int, end: int) -> int:
        """Abort every rid in [first, end) (a dead frontend's: their KV caches are freed, the
        workers told in one flush), and refuse the range's requests still on their way for a while
        (`DeadRanges`). Returns how many were aborted."""
        self.dead_ranges.add(first, end)
        running = [seq for rid, seq in self.running.items() if first <= rid < end]
        waiting = [seq for seq in self.waiting if first <= seq.rid < end]
        for seq in running:
            del self.running[seq.rid]
        if waiting:
            kept = [seq for seq in self.waiting if not first <= seq.rid < end]
            self.waiting.clear()
            self.waiting.extend(kept)
        told = False
        for seq in (*running, *waiting):
            if seq.registered:  # (a preempted sequence waits registered)
                self.client.end(seq.rid, "abort")
                told = True
            seq.cache = None
            self.stats.finished += 1
            self.stats.aborted += 1
        if told:
            self.client.flush()
        return len(running) + len(waiting)

    def fail_running(self, message: str) -> int:
        """Finish every running sequence with an error (a step failed: their state cannot be
        trusted, and a failing batch must not be retried forever). Returns how many."""
        failed = list(self.running.values())
        self.running.clear()
        for seq in failed:
            seq.cache = None
            self.stats.finished += 1
            self._log_finished(seq, "error")
            try:
                self.client.fail(seq.rid, message)
            except Exception as e:  # noqa: BLE001
                log.warning("could not fail rid %s: %s", seq.rid, e)
        return len(failed)

    def _reject(self, request: GenerateRequest, message: str) -> None:
        self.stats.rejected += 1
        log.warning("rid %s: %s", request.rid, message)
        try:
            self.client.fail(request.rid, message, request.reply_to)
        except Exception as e:  # noqa: BLE001 - a rid or endpoint that cannot travel is only logged
            log.warning("could not tell the frontend of rid %s: %s", request.rid, e)

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def kv_tokens(self) -> int:
        """Tokens held in KV caches now (what the memory bound counts)."""
        return sum(s.cache.length for s in self.running.values() if s.cache is not None)

    @property
    def caches(self) -> int:
        """KV caches alive (one per running sequence; 0 when idle)."""
        return sum(s.cache is not None for s in (*self.running.values(), *self.waiting))

    # ---- one step ---------------------------------------------------------------------------------
    def step(self) -> int:
        """One engine step; returns how many sequences got a token."""
        t0 = time.perf_counter()
        stops = self.client.poll()
        self.stats.client_s += time.perf_counter() - t0
        for stopped in stops:
            seq = self.running.pop(stopped.rid, None) or self._pop_waiting(stopped.rid)
            if seq is not None:
                seq.cache = None  # freed at once: no more tokens for it
                self.stats.stopped_by_workers += 1
                self.stats.finished += 1
                self._log_finished(seq, "stopped by detok")
        self._admit()
        if not self.running:
            if self._full_workers:
                self._full_workers = self.client.flush()
            return 0
        plan = self._plan()
        t_model = time.perf_counter()
        logits = self.model.forward([Segment(s.cache, s.tokens[s.cache.length : s.cache.length + n])  # type: ignore[union-attr]
                                     for s, n in plan])
        self.stats.prefill_tokens += sum(n for _, n in plan if n > 1)
        rids, starts, tokens, ends, columns = self._sample([(i, s) for i, (s, _) in enumerate(plan) if s.pending == 0],
                                                           logits)
        model_s = time.perf_counter() - t_model
        self.stats.model_s += model_s
        if all(n == 1 for _, n in plan):
            self.stats.decode_s += model_s
            self.stats.decode_tokens += len(tokens)
        for end in ends:
            seq = self.running.pop(end.rid)
            seq.cache = None
            self.stats.finished += 1
            self._log_finished(seq, end.reason)
        t_send = time.perf_counter()
        self._full_workers = self.client.send_step(rids, tokens, starts=starts, ends=ends, logprobs=columns)
        self.stats.client_s += time.perf_counter() - t_send
        self.stats.steps += 1
        self.stats.tokens += len(tokens)
        self.stats.step_s += time.perf_counter() - t0
        return len(rids)

    def _sample(self, ready: list[tuple[int, Sequence]], logits: np.ndarray
                ) -> tuple[list[int], list[int], list[int], list[EndRequest], LogprobColumns | None]:
        """A token for each sequence whose pending tokens are all in (`ready`: (logits row,
        sequence)): the step's rids, output starts, tokens, ends, and the logprob columns of the
        rows that asked for them."""
        rids: list[int] = []
        starts: list[int] = []
        tokens: list[int] = []
        ends: list[EndRequest] = []
        rows: list[int] = []
        sampled: list[float] = []
        counts: list[int] = []
        top_ids: list[int] = []
        top_lps: list[float] = []
        wants = [i for i, s in ready if s.request.logprobs is not None and s.request.logprobs >= 0]
        logprobs = dict(zip(wants, log_softmax(logits[wants]))) if wants else {}
        for i, seq in ready:
            token = seq.sampler.draw(seq.mask(logits[i]), seq.tokens, seq.prompt_len)
            lp = logprobs.get(i)
            if lp is not None:
                ids, vals = top_logprobs(lp, min(seq.request.logprobs or 0, MAX_TOP_LOGPROBS))
                rows.append(len(rids))
                sampled.append(float(lp[token]))
                counts.append(len(ids))
                top_ids.extend(ids.tolist())
                top_lps.extend(vals.tolist())
            rids.append(seq.rid)
            starts.append(seq.generated)  # the index of this token in the output
            tokens.append(token)
            end = seq.append(token)
            if end is not None:
                ends.append(end)
        columns = LogprobColumns(rows, sampled, counts, top_ids, top_lps) if rows else None
        return rids, starts, tokens, ends, columns

    def _plan(self) -> list[tuple[Sequence, int]]:
        """(sequence, tokens it feeds) for this step: every decode, then prefill chunks, within the
        step's token budget and the KV budget (preempting the newest sequences if a step of decodes
        alone would not fit)."""
        while True:
            decodes = [s for s in self.running.values() if s.pending == 1]
            room = self.kv_token_budget - self.kv_tokens - len(decodes)
            budget = max(0, self.limits.max_step_tokens - len(decodes))
            plan = [(s, 1) for s in decodes] if room >= 0 else []
            for s in self.running.values():
                if s.pending > 1 and budget > 0 and room > 0:
                    n = min(s.pending, budget, room)
                    plan.append((s, n))
                    budget -= n
                    room -= n
            if plan:  # (never empty for a lone sequence: the context fits the KV budget)
                return plan
            self._preempt(next(reversed(self.running.values())))

    def _preempt(self, seq: Sequence) -> None:
        del self.running[seq.rid]
        seq.cache = None
        self.waiting.appendleft(seq)
        self.stats.preempted += 1
        log.info("preempted rid %d (KV cache full): it will be recomputed", seq.rid)

    def _admit(self) -> None:
        if self._full_workers:  # a worker's queue is full: admit nothing until it drains
            return
        used = self.kv_tokens
        while self.waiting and len(self.running) < self.limits.max_running:
            seq = self.waiting[0]
            # room for its pending tokens and one more token of every running sequence
            if self.running and used + seq.pending + len(self.running) + 1 > self.kv_token_budget:
                break
            self.waiting.popleft()
            if not seq.registered:
                t0 = time.perf_counter()
                self.client.add_request(seq.request)
                self.stats.client_s += time.perf_counter() - t0
                seq.registered = True
                self.stats.admitted += 1
            used += seq.pending
            seq.cache = self.model.new_cache(seq.cache_capacity)
            self.running[seq.rid] = seq

    def _log_finished(self, seq: Sequence, reason: str) -> None:
        if self._record:
            self.finished_log[seq.rid] = (seq.tokens[seq.prompt_len :], reason)
            while len(self.finished_log) > self._record:
                self.finished_log.popitem(last=False)
