"""The engine's scheduling is right by construction: what each request generates never depends on
the batch bound, the KV budget (preemption and recompute), the step's token budget (prefill
chunks) or when the other requests arrive - and every request streams its tokens once, in order,
and leaves no KV cache behind. A stand-in model whose logits are a function of a sequence's whole
history (so a recompute that fed different tokens would show) and a recording client keep this
fast enough for hypothesis."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence as Seq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.wire.params import DecodeParams
from detok.wire.to_scheduler import GenerateRequest
from reference_engine.engine import Engine
from reference_engine.limits import EngineLimits
from reference_engine.model import Segment

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "40"))
VOCAB, CONTEXT, EOS = 40, 48, 0


@dataclasses.dataclass(frozen=True)
class _Cfg:
    vocab_size: int = VOCAB
    context_length: int = CONTEXT
    kv_bytes_per_token: int = 1


class _Cache:
    def __init__(self, capacity: int) -> None:
        self.capacity, self.length, self.history = capacity, 0, []  # type: ignore[var-annotated]


class _Model:
    cfg = _Cfg()

    def new_cache(self, capacity: int) -> _Cache:
        return _Cache(min(capacity, CONTEXT))

    def forward(self, segments: Seq[Segment]) -> np.ndarray:
        rows = []
        for cache, tokens in segments:
            assert cache.length + len(tokens) <= cache.capacity
            cache.history.extend(tokens)
            cache.length += len(tokens)
            seed = int.from_bytes(hashlib.blake2b(np.array(cache.history, np.int64).tobytes(), digest_size=8).digest())
            rows.append(np.random.default_rng(seed).normal(0, 3, VOCAB).astype(np.float32))
        return np.stack(rows)


class _Client:
    """Records what a SchedulerClient would send."""

    def __init__(self) -> None:
        self.tokens: dict[int, list[int]] = {}
        self.starts: dict[int, list[int]] = {}
        self.ends: dict[int, str] = {}

    def add_request(self, request: GenerateRequest) -> int:
        assert request.rid not in self.tokens
        self.tokens[request.rid], self.starts[request.rid] = [], []
        return 0

    def send_step(self, rids, tokens, counts=None, *, starts, ends, logprobs=None):  # type: ignore[no-untyped-def]
        for rid, token, start in zip(rids, tokens, starts):
            assert rid not in self.ends
            self.tokens[rid].append(token)
            self.starts[rid].append(start)
        for end in ends:
            self.ends[end.rid] = end.reason
        return []

    def poll(self) -> list[object]:
        return []

    def flush(self) -> list[int]:
        return []


_REQUEST = st.tuples(
    st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=20),  # prompt
    st.integers(1, 24),  # max_tokens
    st.sampled_from([0.0, 1.0]),  # temperature
    st.integers(0, 2**32),  # seed
    st.integers(0, 24),  # min_tokens (EOS masked until then: longer outputs, more preemption)
)
_LIMITS = st.builds(EngineLimits, max_running=st.integers(1, 5), kv_cache_bytes=st.integers(CONTEXT, 120),
                    max_step_tokens=st.integers(1, 16))


def _run(requests: list[tuple], limits: EngineLimits, arrivals: list[int]) -> tuple[_Client, Engine]:
    client = _Client()
    engine = Engine(_Model(), client, frozenset({EOS}), limits)  # type: ignore[arg-type]
    pending = sorted(zip(arrivals, range(len(requests))))
    step = 0
    while pending or not engine.idle:
        while pending and pending[0][0] <= step:
            _, i = pending.pop(0)
            prompt, max_tokens, temperature, seed, min_tokens = requests[i]
            max_tokens = min(max_tokens, CONTEXT - len(prompt))
            engine.handle(GenerateRequest(i, prompt, DecodeParams(min_tokens=min(min_tokens, max_tokens)), max_tokens,
                                          "ipc:///unused", seed=seed, temperature=temperature))
        engine.step()
        assert engine.kv_tokens <= engine.kv_token_budget and len(engine.running) <= limits.max_running
        step += 1
        assert step < 10_000
    return client, engine


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(_REQUEST, min_size=1, max_size=6), _LIMITS, st.data())
def test_outputs_do_not_depend_on_batching_budgets_or_arrivals(requests, limits, data):
    alone, _ = _run(requests, EngineLimits(max_running=1, kv_cache_bytes=10_000, max_step_tokens=1000),
                    [0] * len(requests))
    arrivals = data.draw(st.lists(st.integers(0, 30), min_size=len(requests), max_size=len(requests)))
    client, engine = _run(requests, limits, arrivals)
    assert client.tokens == alone.tokens and client.ends == alone.ends
    for rid, starts in client.starts.items():
        assert starts == list(range(len(client.tokens[rid])))  # each token once, in order
        prompt, max_tokens, _, _, min_tokens = requests[rid]
        out = client.tokens[rid]
        assert 1 <= len(out) <= max_tokens
        assert EOS not in out[:min_tokens]  # masked until min_tokens are out
        assert (client.ends[rid] == "stop") == (out[-1] == EOS and len(out) > min_tokens)
    assert engine.caches == 0 and engine.kv_tokens == 0 and engine.stats.finished == len(requests)


def test_the_stand_in_exercises_preemption_and_chunked_prefill():
    """The property above covers recompute: a tight budget does preempt, and chunks do happen."""
    requests = [([5] * 20, 24, 1.0, s, 24) for s in range(4)]  # min_tokens: no early EOS
    client, engine = _run(requests, EngineLimits(max_running=4, kv_cache_bytes=CONTEXT, max_step_tokens=7), [0] * 4)
    alone, _ = _run(requests, EngineLimits(max_running=1, kv_cache_bytes=10_000, max_step_tokens=1000), [0] * 4)
    assert engine.stats.preempted > 0 and client.tokens == alone.tokens
