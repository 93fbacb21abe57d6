"""The logprob options of the benchmarks stay runnable (mock tokenizer: seconds): bench/pool.py
--logprobs runs detok with and without logprobs side by side and every entry arrives;
bench/worker.py's logprob messages and bench/logprobs_frontend.py's configurations work;
bench/load.py --logprobs asks for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import detok

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]

from bench import logprobs_frontend  # noqa: E402
from bench import worker  # noqa: E402
from bench.pool_drivers import LogprobTable, Workload  # noqa: E402


def test_bench_pool_with_and_without_logprobs() -> None:
    out = subprocess.run(
        [sys.executable, "bench/pool.py", "--tokenizer", "mock", "--concurrency", "16", "--tokens", "12", "--rounds", "1",
         "--step-interval-ms", "2", "--pipelines", "detok", "--logprobs", "3", "--json", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=100, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = {r["pipeline"]: r for r in map(json.loads, out.stdout.splitlines()) if "pipeline" in r}
    assert set(runs) == {"detok", "detok+logprobs3"}
    assert all(r["mismatches"] == 0 and "worker_cpu_ns_per_token" in r for r in runs.values())
    assert runs["detok+logprobs3"]["logprob_entries_missing"] == 0 and "logprob_entries_missing" not in runs["detok"]


def test_bench_worker_and_frontend_with_logprobs() -> None:
    tok = detok.load_tokenizer("mock")
    outputs = np.array([tok.encode("hello world, this is a test of it")[:8]] * 6, dtype=np.uint32).T.copy()
    w = Workload([[1, 2]] * 6, outputs, 1)
    table = LogprobTable.make(outputs, 2, tok.vocab_size)
    assert table.top_ids[..., 0].tolist() == outputs.tolist()  # the sampled id first, sorted below it
    assert (np.diff(table.top_logprobs, axis=-1) <= 0).all() and (table.sampled <= 0).all()
    plain, with_lp = worker.encode_workload(w, 1), worker.encode_workload(w, 1, table)
    assert sum(map(len, with_lp)) > sum(map(len, plain))
    assert worker.run_once(tok, with_lp, True)[1] > worker.run_once(tok, plain, True)[1]
    messages = logprobs_frontend.frontend_messages(tok, w, table)
    rids = list(range(w.requests))
    # what is timed really happens: a logprob payload formatted for every request at every step
    # (CPU seconds themselves are the benchmark's report, never asserted)
    every = w.requests * outputs.shape[0]
    for decode in (None, lambda ids: tok.decode(ids, skip_special_tokens=False)):
        assert logprobs_frontend.handle(messages, rids, 2, decode)[1] == every
    assert logprobs_frontend.handle(logprobs_frontend.without_strings(messages), rids, 2, None)[1] == every
    assert isinstance(logprobs_frontend.run_once(messages, rids, 2, None), float)


def test_load_bench_asks_for_logprobs() -> None:
    """bench/load.py --logprobs N: the parameter as each endpoint names it (absent without it)."""
    from bench import load, load_requests

    chat = load_requests.request_body(load_requests.LoadConfig("http://x", endpoint="chat", logprobs=5), 1)
    assert (chat["logprobs"], chat["top_logprobs"]) == (True, 5)
    assert load_requests.request_body(load_requests.LoadConfig("http://x", logprobs=3), 1)["logprobs"] == 3
    assert "logprobs" not in load_requests.request_body(load_requests.LoadConfig("http://x"), 1)
    assert load._parse_args(["--url", "http://x", "--logprobs", "2"]).logprobs == 2


def test_load_bench_offers_tools_and_times_every_kind_of_output() -> None:
    """bench/load.py --tools: chat requests offer its tool; a chunk of reasoning or of tool-call
    fragments is output as content is (timed: TTFT, then the gaps), an empty delta is not."""
    from bench import load, load_requests
    from bench.load_summary import _Sample

    chat = load_requests.request_body(load_requests.LoadConfig("http://x", endpoint="chat", tools=True), 1)
    assert chat["tools"] == load_requests.TOOLS and chat["tool_choice"] == "auto"
    assert "tools" not in load_requests.request_body(load_requests.LoadConfig("http://x", endpoint="chat"), 1)
    assert load._parse_args(["--url", "http://x", "--tools"]).tools
    sample = _Sample(ok=False)
    clock = load_requests.ChunkClock(0.0, sample)
    for delta in ({"role": "assistant", "content": ""}, {"reasoning": "hm"}, {"reasoning_content": "so"},
                  {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}, {"content": "x"}, {}):
        clock(json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode())
    assert sample.ttft > 0 and len(sample.itls) == 3


def test_push_rows_bench_writes_the_same_chunks_both_ways() -> None:
    """bench/push_rows.py: with and without the direct rows, every message dispatched, the same
    chunks written (what is timed is the same work; the times are its report, never asserted)."""
    pytest.importorskip("detok._native._chunkpush", reason="built without its C extensions")
    from bench import push_rows

    tok = detok.load_tokenizer("mock")
    outputs = np.array([tok.encode("hello world, this is a test of it")[:8]] * 6, dtype=np.uint32).T.copy()
    w = Workload([[1, 2]] * 6, outputs, 1)
    table = LogprobTable.make(outputs, 2, tok.vocab_size)
    rids = list(range(w.requests))
    for messages, items in ((logprobs_frontend.frontend_messages(tok, w, None), False),
                            (logprobs_frontend.frontend_messages(tok, w, table, "chat"), True)):
        queue, direct = push_rows.run_once(messages, rids, items, False), push_rows.run_once(messages, rids, items, True)
        assert queue[1] == direct[1] > 0 and queue[0] >= 0 and direct[0] >= 0
        # (with the caches written over between messages: the same chunks)
        evicted = push_rows.run_once(messages, rids, items, True, bytearray(64 * 1024))
        assert evicted[1] == direct[1]
