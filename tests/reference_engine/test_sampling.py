"""The sampler: greedy is argmax, a seed reproduces its draws, top-k/top-p narrow the choice,
logprobs are a distribution with their alternatives ordered."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_engine.sampling import SamplingState, log_softmax, top_logprobs

_ROWS = st.lists(st.floats(-30, 30, allow_nan=False, width=32), min_size=2, max_size=64).map(
    lambda xs: np.array(xs, np.float32))


@settings(max_examples=50, deadline=None)
@given(_ROWS, st.integers(0, 2**63 - 1))
def test_greedy_top1_and_tiny_top_p_take_the_argmax(row, seed):
    best = int(np.argmax(row))
    assert SamplingState.of(0.0, 1.0, -1, seed).draw(row) == best
    if (row == row.max()).sum() == 1:  # a unique maximum
        assert SamplingState.of(1.0, 1.0, 1, seed).draw(row) == best
        assert SamplingState.of(1.0, 1e-9, -1, seed).draw(row) == best


@settings(max_examples=50, deadline=None)
@given(_ROWS, st.integers(-(2**63), 2**63 - 1), st.integers(1, 8))
def test_a_seed_reproduces_draws_and_top_k_bounds_them(row, seed, k):
    a, b = SamplingState.of(1.0, 0.9, k, seed), SamplingState.of(1.0, 0.9, k, seed)
    draws = [a.draw(row) for _ in range(20)]
    assert draws == [b.draw(row) for _ in range(20)]
    allowed = set(np.argsort(-row, kind="stable")[:k].tolist()) | set(np.flatnonzero(row >= np.sort(row)[-min(k, len(row))]).tolist())
    assert set(draws) <= allowed


def test_different_seeds_draw_differently():
    row = np.zeros(1000, np.float32)
    draws = {tuple(SamplingState.of(1.0, 1.0, -1, s).draw(row) for _ in range(5)) for s in range(5)}
    assert len(draws) == 5


@settings(max_examples=50, deadline=None)
@given(_ROWS, st.integers(0, 70))
def test_logprobs_are_a_distribution_with_ordered_alternatives(row, k):
    lp = log_softmax(row[None, :])[0]
    assert np.all(lp <= 1e-6) and abs(np.exp(lp.astype(np.float64)).sum() - 1) < 1e-4
    ids, vals = top_logprobs(lp, k)
    assert len(ids) == min(k, len(row)) and np.all(np.diff(vals) <= 0)
    if k:
        assert vals[0] == lp.max()
