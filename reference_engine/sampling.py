"""Sampling and logprobs for a batch of rows of logits.

As vLLM v1: first the request's extras (`SamplingExtras`) in its order - ids outside
`allowed_token_ids` and the last id of a bad word whose other ids end the output masked, then
`logit_bias` added, then
the repetition penalty on every id of the prompt and output (a positive logit divided by it, a
negative one multiplied), the frequency and presence penalties on the output's ids (minus penalty
x count, minus penalty once) - which greedy sampling sees too; temperature below `GREEDY_BELOW` is
greedy (argmax); otherwise logits / temperature, then `min_p` (tokens less likely than min_p x the
most likely one's probability dropped), then top-k, then top-p (the smallest set of most likely
tokens whose probability reaches top_p, always at least one), then a draw from the request's own
generator (seeded by its `seed`, so a seeded request gives the same tokens in any batch). Logprobs are the model's raw ones (vLLM's
default `raw_logprobs`): log-softmax of the logits before temperature, top-k/top-p or the
min_tokens mask, so they say what the model thought, not what the sampler allowed.
"""

from __future__ import annotations

import dataclasses
from typing import Final

import numpy as np

from detok.wire.to_scheduler import SamplingExtras

GREEDY_BELOW: Final = 1e-5  # vLLM's _SAMPLING_EPS


@dataclasses.dataclass
class SamplingState:
    """One sequence's sampler: its knobs and its random generator (which advances per draw)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # <= 0: off
    rng: np.random.Generator = dataclasses.field(default_factory=np.random.default_rng)
    extras: SamplingExtras | None = None  # None: vLLM's defaults (nothing to apply)
    allowed: np.ndarray | None = None  # extras.allowed_token_ids as an array, made at the first draw

    @classmethod
    def of(cls, temperature: float, top_p: float, top_k: int, seed: int | None,
           extras: SamplingExtras | None = None) -> SamplingState:
        # int64 seeds (vLLM's range) map onto numpy's non-negative seeds one to one
        rng = np.random.default_rng(None if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF)
        return cls(temperature, top_p, top_k, rng, extras)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def draw(self, logits: np.ndarray, tokens: list[int] | None = None, prompt_len: int = 0) -> int:
        """One token from one row of (already masked) logits; `tokens`: the sequence so far (prompt,
        then `prompt_len` on the output), for the penalties."""
        if self.extras is not None:
            masked = self._with_extras(logits, tokens or [], prompt_len)
            # (extras that leave no token at all - allowed ids all banned or held back by min_tokens -
            # contradict each other: the row without them is sampled rather than a NaN one)
            logits = masked if np.isfinite(masked).any() else logits
        if self.greedy:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.temperature
        min_p = self.extras.min_p if self.extras is not None else 0.0
        if min_p > 0:
            p = np.exp(z - z.max())
            z[p < min_p * p.max()] = -np.inf  # (p.max() is 1 here: the most likely token always stays)
        if 0 < self.top_k < z.shape[0]:
            kth = np.partition(z, -self.top_k)[-self.top_k]
            z[z < kth] = -np.inf
        z -= z.max()
        p = np.exp(z)
        p /= p.sum()
        if self.top_p < 1.0:
            order = np.argsort(-z, kind="stable")  # by logit: probabilities may round to a tie
            before = np.cumsum(p[order]) - p[order]  # mass of the more likely tokens
            drop = order[before >= self.top_p]  # the first token always stays (before = 0)
            p[drop] = 0.0
            p /= p.sum()
        cdf = np.cumsum(p)
        return int(min(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"), len(p) - 1))


    def _with_extras(self, logits: np.ndarray, tokens: list[int], prompt_len: int) -> np.ndarray:
        e = self.extras
        assert e is not None
        x = logits.astype(np.float64)  # (a copy: the batch's row stays the model's)
        n = x.shape[0]
        if e.allowed_token_ids:
            if self.allowed is None:  # (once per sequence: up to 65,536 ids)
                self.allowed = np.asarray([i for i in e.allowed_token_ids if 0 <= i < n], dtype=np.int64)
            allowed = self.allowed
            kept = x[allowed]
            x[:] = -np.inf
            x[allowed] = kept
        output = tokens[prompt_len:]
        for word in e.bad_words:  # (vLLM's _apply_bad_words_single_batch)
            prefix = len(word) - 1
            if prefix <= len(output) and 0 <= word[-1] < n and tuple(output[len(output) - prefix:]) == word[:-1]:
                x[word[-1]] = -np.inf
        for token, bias in e.logit_bias:
            if 0 <= token < n:
                x[token] += bias
        if e.repetition_penalty != 1.0 and tokens:
            seen = np.unique(np.asarray(tokens, dtype=np.int64))
            seen = seen[(seen >= 0) & (seen < n)]
            v = x[seen]
            x[seen] = np.where(v > 0, v / e.repetition_penalty, v * e.repetition_penalty)
        if (e.frequency_penalty or e.presence_penalty) and len(tokens) > prompt_len:
            ids, counts = np.unique(np.asarray(tokens[prompt_len:], dtype=np.int64), return_counts=True)
            keep = (ids >= 0) & (ids < n)
            x[ids[keep]] -= e.frequency_penalty * counts[keep] + e.presence_penalty
        return x


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32 (rows of a batch at once)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def top_logprobs(logprobs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely ids of one row and their logprobs, most likely first (ties: lower id)."""
    if k <= 0:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    k = min(k, logprobs.shape[0])
    part = np.argpartition(-logprobs, k - 1)[:k]
    order = np.lexsort((part, -logprobs[part]))
    ids = part[order]
    return ids, logprobs[ids]
