"""The stub's deterministic logprobs: plausible (sorted, <= 0, the sampled id among the top-k),
a function of seed and position, and no work at all for steps where no request asks."""

from __future__ import annotations

import pytest

from detok.wire.to_scheduler import GenerateRequest
from detok.wire.to_workers import MAX_TOP_LOGPROBS
from detok.wire.params import DecodeParams
from scheduler_stub.logprobs import step_logprobs, token_logprobs
from scheduler_stub.stub import SchedulerStub, StepPolicy
from scheduler_stub.workload import RandomIdsWorkload


@pytest.mark.parametrize("k", [0, 1, 2, 5, 20, 25])
def test_token_logprobs_are_plausible_and_deterministic(k: int) -> None:
    ranks = []
    for seed in range(-3, 40):
        for pos in range(0, 300, 7):
            sampled = (seed * 31 + pos) % 1000
            lp, ids, lps = token_logprobs(seed, pos, sampled, k, 1000)
            assert (lp, ids, lps) == token_logprobs(seed, pos, sampled, k, 1000)
            assert len(ids) == len(lps) == min(k, MAX_TOP_LOGPROBS) and len(set(ids)) == len(ids)
            assert all(0 <= i < 1000 for i in ids)
            assert lps == sorted(lps, reverse=True) and all(x <= 0 for x in lps) and lp <= 0
            if k:
                ranks.append(ids.index(sampled))
                assert lps[ids.index(sampled)] == lp
    if k > 1:
        assert 0.6 < ranks.count(0) / len(ranks) < 0.9  # mostly the top token, not always


def test_token_logprobs_fit_a_tiny_vocabulary() -> None:
    lp, ids, _ = token_logprobs(1, 2, 3, 20, 4)
    assert sorted(ids) == [0, 1, 2, 3] and lp <= 0


def test_step_columns_only_for_rows_that_ask() -> None:
    assert step_logprobs([1, 2], [0, 0], [1, 1], [5, 6], {}, 100) is None
    cols = step_logprobs([1, 2, 3], [4, 0, 9], [2, 1, 1], [5, 6, 7, 8], {1: (11, 2), 3: (0, 0)}, 100)
    assert cols.rows == [0, 2] and cols.top_counts == [2, 2, 0]
    assert cols.sampled[1] == token_logprobs(11, 5, 6, 2, 100)[0]


class _Client:
    """Records what the stub sends (no pool needed)."""

    def __init__(self) -> None:
        self.steps: list[dict] = []

    def poll(self) -> list:
        return []

    def add_request(self, request) -> int:
        return 0

    def send_step(self, rids, tokens, counts=None, *, starts=None, ends=(), logprobs=None) -> list[int]:
        self.steps.append({"rids": list(rids), "logprobs": logprobs, "ends": list(ends)})
        return []


def test_stub_sends_logprobs_only_while_a_request_that_asked_runs(tok_mock) -> None:
    client = _Client()
    stub = SchedulerStub(client, RandomIdsWorkload(tok_mock), tok_mock.eos_token_ids, StepPolicy(0.0, 8))  # type: ignore[arg-type]
    stub.submit(GenerateRequest(1, [1], DecodeParams(), 3, "ipc:///x", 5))
    stub.submit(GenerateRequest(2, [2], DecodeParams(), 5, "ipc:///x", 6, logprobs=1))
    for _ in range(6):
        stub.step()
    with_lp = [s for s in client.steps if s["logprobs"] is not None]
    assert [s["logprobs"].rows for s in with_lp] == [[1], [1], [1], [0], [0]]  # rid 2's rows, while it runs
    assert len(client.steps) == 5 and not stub.running
    assert stub._logprobs == {}  # forgotten once ended


@pytest.fixture(scope="module")
def tok_mock():
    from detok.tokenizer.factory import load_tokenizer

    return load_tokenizer("mock")

