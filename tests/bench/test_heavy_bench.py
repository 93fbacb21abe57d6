"""bench/heavy.py and bench/rid_flood.py run end to end on a short setting and report what they
promise: phases with TTFT / ITL / health percentiles and RSS, the heavy client's answers (all
OpenAI 400s), and a worker's RSS around floods of unknown rids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(400)


def _run(*args: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", *args, "--json"], cwd=REPO, capture_output=True, text=True,
                         timeout=360, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_heavy_bench_reports_quiet_heavy_and_after() -> None:
    quiet, heavy, after = _run("bench.heavy", "--users", "2", "--duration-s", "1", "--after-s", "1",
                               "--warmup-s", "0.5", "--max-tokens", "20")
    assert [quiet["phase"], heavy["phase"], after["phase"]] == ["quiet", "heavy", "after"]
    for phase in (quiet, heavy):
        assert phase["requests"] > 0 and phase["user_errors"] == 0
        assert phase["itl_p50_ms"] <= phase["itl_p99_ms"] <= phase["itl_max_ms"]
        assert phase["rss_peak_mb"] >= phase["rss_start_mb"] > 0 and phase["rss_timeline_1s_mb"]
    assert heavy["heavy_requests"] > 0
    assert set(heavy["heavy_answers"]) == {"400 context_length_exceeded"}
    assert after["rss_after_1s_mb"] > 0 and "itl_p99_vs_quiet" in heavy


def test_rid_flood_bench_reports_rss_around_each_flood() -> None:
    rows = _run("bench.rid_flood", "--floods", "2000,20000", "--after-s", "1")
    assert [r["rids"] for r in rows] == [2000, 20000]
    for r in rows:
        assert r["rss_peak_mb"] >= r["rss_before_mb"] * 0.5 > 0 and r["rss_after_1s_mb"] > 0
