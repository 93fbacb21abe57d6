"""The sampler: greedy is argmax, a seed reproduces its draws, top-k/top-p narrow the choice,
logprobs are a distribution with their alternatives ordered."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.wire.to_scheduler import SamplingExtras
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


# ---- vLLM's extras: logit_bias, the three penalties, min_p --------------------------------------------


def _reference_processed(row: np.ndarray, tokens: list[int], prompt_len: int, extras) -> list[float]:  # type: ignore[no-untyped-def]
    """vLLM v1's order, one id at a time (an independent statement of the rules)."""
    from collections import Counter

    out = [float(v) for v in row]
    for token, bias in extras.logit_bias:
        out[token] += bias
    output = Counter(tokens[prompt_len:])
    for i in range(len(out)):
        if i in set(tokens) and extras.repetition_penalty != 1.0:
            out[i] = out[i] / extras.repetition_penalty if out[i] > 0 else out[i] * extras.repetition_penalty
        if output[i]:
            out[i] -= extras.frequency_penalty * output[i] + extras.presence_penalty
    return out


@settings(max_examples=80, deadline=None)
@given(_ROWS, st.data())
def test_extras_are_applied_as_vllm_orders_them(row, data):
    n = len(row)
    tokens = data.draw(st.lists(st.integers(0, n - 1), max_size=12))
    prompt_len = data.draw(st.integers(0, len(tokens)))
    bias = tuple(data.draw(st.dictionaries(st.integers(0, n - 1), st.floats(-100, 100), max_size=3)).items())
    extras = SamplingExtras(0.0, data.draw(st.floats(-2, 2)), data.draw(st.floats(-2, 2)),
                            data.draw(st.floats(0.1, 3)), bias)
    state = SamplingState.of(0.0, 1.0, -1, 0, extras)
    got = state._with_extras(row, tokens, prompt_len)
    assert np.allclose(got, _reference_processed(row, tokens, prompt_len, extras), rtol=1e-9, atol=1e-9)
    assert state.draw(row, tokens, prompt_len) == int(np.argmax(got))  # greedy sees them too


def test_logit_bias_steers_greedy_and_min_p_drops_the_unlikely():
    row = np.array([5.0, 1.0, 0.0, -1.0], np.float32)
    assert SamplingState.of(0.0, 1.0, -1, 0, SamplingExtras(logit_bias=((3, 100.0),))).draw(row) == 3
    assert SamplingState.of(0.0, 1.0, -1, 0, SamplingExtras(logit_bias=((0, -100.0),))).draw(row) == 1
    # probabilities e^0 : e^-1 : e^-2 : e^-3 of the best: min_p 0.2 keeps ids 0 and 1 (e^-2 = 0.135)
    row = np.array([0.0, -1.0, -2.0, -3.0], np.float32)
    kept, plain = SamplingState.of(1.0, 1.0, -1, 7, SamplingExtras(min_p=0.2)), SamplingState.of(1.0, 1.0, -1, 7)
    assert {kept.draw(row) for _ in range(2000)} == {0, 1}
    assert {plain.draw(row) for _ in range(2000)} == {0, 1, 2, 3}


def test_allowed_ids_and_bad_words_mask_as_vllm():
    row = np.array([5.0, 4.0, 3.0, 2.0, 1.0], np.float32)
    only = SamplingState.of(1.0, 1.0, -1, 3, SamplingExtras(allowed_token_ids=(3, 4)))
    assert {only.draw(row) for _ in range(300)} == {3, 4}
    # a bad word's last id is banned only where the output so far ends with its other ids
    banned = SamplingState.of(0.0, 1.0, -1, 0, SamplingExtras(bad_words=((0,), (2, 1))))
    assert banned.draw(row, [9, 9], 1) == 1  # (0 banned everywhere; 1 allowed: the output does not end with 2)
    assert banned.draw(row, [9, 2], 1) == 2  # (the output ends with 2: 1 banned too)
    assert banned.draw(row, [2, 9], 2) == 1  # (a prompt id is not output)


def test_extras_that_leave_no_token_sample_the_row_without_them():
    # allowed ids all banned by bad words: contradictory extras; a finite row is sampled, no NaN
    row = np.array([1.0, 3.0, 2.0], np.float32)
    extras = SamplingExtras(allowed_token_ids=(2,), bad_words=((2,),))
    assert SamplingState.of(0.0, 1.0, -1, 0, extras).draw(row) == 1
    assert SamplingState.of(1.0, 1.0, -1, 0, extras).draw(row) in (0, 1, 2)
