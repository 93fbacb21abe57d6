"""The heavy but legal request bodies (each under the 8 MB body limit; docs/reliability.md), for
the hostile-input tests (the bench builds the same in bench/heavy.py)."""

from __future__ import annotations

import json

from scheduler_stub.workload import embedded_corpus_text

MB = 1_000_000


def _english(size: int) -> str:
    base = "The quick brown fox jumps over the lazy dog, and then it naps in the sun. "
    return (base * (size // len(base) + 1))[:size]


def _cjk(size_bytes: int) -> str:
    base = "".join(c for c in embedded_corpus_text() if ord(c) > 0x2E80) or "你好世界"
    chars = size_bytes // 3
    return (base * (chars // len(base) + 1))[:chars]


def heavy_bodies(model: str) -> dict[str, bytes]:
    """name -> body: the table's rows (the "two at once" row sends the first one twice)."""
    big = _english(int(3.8 * MB))
    return {
        "completion 3.8 MB text": json.dumps({"model": model, "prompt": big, "max_tokens": 8}).encode(),
        "chat one 3.8 MB message": json.dumps(
            {"model": model, "messages": [{"role": "user", "content": big}], "max_tokens": 8}).encode(),
        "completion 2 MB CJK": json.dumps({"model": model, "prompt": _cjk(2 * MB), "max_tokens": 8},
                                          ensure_ascii=False).encode(),
        "completion 800K token ids": json.dumps(
            {"model": model, "prompt": [i % 50_000 for i in range(800_000)], "max_tokens": 8}).encode(),
    }


def english_text(size: int) -> str:
    return _english(size)
