"""bench/parsers.py runs and prints one JSON line with a row per parser (tiny sizes; no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_parsers_bench_json_line() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "bench.parsers", "--tokens", "200", "--repeat", "1", "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True,
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    names = {r["parser"] for r in doc["rows"]}
    assert {"qwen3", "deepseek_r1", "glm45", "kimi_k2", "mistral", "openai_gptoss", "openai (arguments)"} <= names
    for r in doc["rows"]:
        if "skipped" not in r:
            assert r["tokens"] > 0 and r["loop_ns"] >= 0
