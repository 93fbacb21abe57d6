"""bench/pool.py stays runnable: a tiny run of detok's pipeline and the SGLang-style anchor, with
the JSON fields the report reads and no mismatch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tokenizers_available import hf_qwen2_dir

pytestmark = pytest.mark.timeout(240)
REPO = Path(__file__).resolve().parents[2]


def test_bench_pool_small_run() -> None:
    out = subprocess.run(
        [sys.executable, "bench/pool.py", "--tokenizer", str(hf_qwen2_dir()), "--concurrency", "32", "--tokens", "16",
         "--rounds", "1", "--step-interval-ms", "2", "--pipelines", "detok,sglang", "--json", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=220, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in out.stdout.splitlines()]
    balance = [r for r in records if r.get("metric") == "shard_balance"]
    assert balance and balance[0]["max_over_mean_sequential"] <= 1.05
    runs = {r["pipeline"]: r for r in records if "pipeline" in r}
    assert set(runs) == {"detok", "sglang"}
    for r in runs.values():
        assert r["mismatches"] == 0
        assert r["tokens_per_s"] > 0 and 0 < r["latency_p50_ms"] <= r["latency_p99_ms"]
        assert r["messages"] == (32 - 1) * 16 // 32 + 16  # steps of a staggered run: ramp up, steady, ramp down


def test_bench_worker_small_run() -> None:
    """bench/worker.py (the worker's loop in-process) runs its three configurations, and every one
    sends the same text: the same number of bytes per token for one frontend, compiled or not."""
    out = subprocess.run(
        [sys.executable, "bench/worker.py", "--tokenizer", str(hf_qwen2_dir()), "--concurrency", "24", "--tokens", "12",
         "--rounds", "2", "--repeats", "1", "--frontends", "3", "--json", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=220, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = {r["config"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert set(runs) == {"compiled", "compiled-3fe", "numpy"}
    assert runs["compiled"]["tokens"] == 24 * 2 * 12 and runs["compiled"]["ratio_vs_compiled"] == 1.0
    assert runs["compiled"]["out_bytes_per_token"] == runs["numpy"]["out_bytes_per_token"] > 0
    assert all(r["ns_per_token"] > 0 for r in runs.values())


def test_bench_replay_small_run() -> None:
    """bench/replay.py: a kill, its replay seen by the receiver, no mismatch or error, and the
    scheduler-side memory figures."""
    out = subprocess.run(
        [sys.executable, "bench/replay.py", "--tokenizer", str(hf_qwen2_dir()), "--concurrency", "16", "--tokens", "150",
         "--step-ms", "5", "--kills", "1", "--kill-every-s", "0.3", "--json", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=220, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    records = {r["metric"]: r for r in map(json.loads, out.stdout.splitlines())}
    run = records["recovery"]
    assert run["kills"] == 1 and run["replays_seen"] == 1 and run["recovery_ms_p50"] > 0
    assert run["mismatches"] == 0 and run["errors"] == 0
    memory = records["scheduler_memory"]
    assert 0 < memory["bytes_per_live_request"] and 4 <= memory["journal_bytes_per_token"] <= 20
