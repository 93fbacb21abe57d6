"""The suite's schedule hint (tests/conftest.py HEAVIEST_FIRST) names files that exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import HEAVIEST_FIRST

ROOT = Path(__file__).resolve().parent.parent


def test_every_file_the_schedule_puts_first_exists_once():
    assert len(set(HEAVIEST_FIRST)) == len(HEAVIEST_FIRST)
    assert [path for path in HEAVIEST_FIRST if not (ROOT / path).is_file()] == []


def test_the_collection_starts_with_the_heaviest_files():
    # (the order is checked on a fresh collection of three files, in a pytest of its own)
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/test_readme.py", "tests/test_suite_schedule.py", "tests/frontend/test_serve.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    files = [line.split("::", 1)[0] for line in out.stdout.splitlines() if "::" in line]
    assert files, out.stdout + out.stderr
    order = list(dict.fromkeys(files))
    assert order == ["tests/test_readme.py", "tests/frontend/test_serve.py", "tests/test_suite_schedule.py"], order
