"""One request's generation state in the engine: its tokens, KV cache, sampler and stop rules.

The stop rules are vLLM's: EOS (unless `ignore_eos`) and the stop token ids end a sequence with
reason "stop" - never before `min_tokens` output tokens, and until then those ids are masked out of
the logits so they cannot be sampled - and `max_tokens` (or a full context) ends it with "length".
The token that ends it is still sent, as an engine sends its sampled EOS. Stop strings are the
detok workers' business: they report them (`StopNotice`) and the engine drops the sequence.
"""

from __future__ import annotations

import numpy as np

from detok.wire.to_scheduler import GenerateRequest
from detok.wire.to_workers import EndRequest
from reference_engine.model import KVCache
from reference_engine.sampling import SamplingState


class Sequence:
    __slots__ = ("request", "rid", "tokens", "prompt_len", "cache", "sampler", "stop_ids", "_masked", "registered",
                 "context")

    def __init__(self, request: GenerateRequest, eos_ids: frozenset[int], context: int) -> None:
        self.request = request
        self.rid = request.rid
        self.tokens: list[int] = list(request.prompt_ids)  # prompt, then output
        self.prompt_len = len(request.prompt_ids)
        self.cache: KVCache | None = None  # None while waiting (or after preemption)
        self.sampler = SamplingState.of(request.temperature, request.top_p, request.top_k, request.seed, request.extras)
        params = request.params
        self.stop_ids = frozenset(params.stop_token_ids) | frozenset(params.visible_stop_token_ids)
        if not request.ignore_eos:
            self.stop_ids |= eos_ids
        self._masked = np.fromiter(sorted(self.stop_ids), dtype=np.int64)
        self.registered = False  # registered with the detok pool (once; a preempted sequence stays registered)
        self.context = context

    @property
    def generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def pending(self) -> int:
        """Tokens not in the KV cache yet: the prompt (prefill), or the last sampled token."""
        return len(self.tokens) - (self.cache.length if self.cache is not None else 0)

    @property
    def cache_capacity(self) -> int:
        """What the cache may grow to: the prompt and every token it may still get, within the context."""
        return min(self.prompt_len + self.request.max_tokens, self.context)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """The row to sample from: stop ids masked while min_tokens are not out yet (a copy then)."""
        if self.generated >= self.request.params.min_tokens or not len(self._masked):
            return logits
        row = logits.copy()
        row[self._masked[self._masked < row.shape[0]]] = -np.inf
        return row

    def append(self, token: int) -> EndRequest | None:
        """Add a sampled token; the end it brings, if any."""
        may_stop = self.generated >= self.request.params.min_tokens
        self.tokens.append(token)
        if token in self.stop_ids and may_stop:
            return EndRequest(self.rid, "stop", token)
        if self.generated >= self.request.max_tokens or len(self.tokens) >= self.context:
            return EndRequest(self.rid, "length")
        return None
