"""Real tokenizers for the parser tests, loaded once per session (tests/parsing/vocabularies.py):
Qwen3.6's vocabulary (`<tool_call>` and `</tool_call>` are single tokens) and Qwen(1)'s, where every
marker is plain text over several tokens."""

from __future__ import annotations

import pytest

from tests.parsing import vocabularies as voc


@pytest.fixture(scope="session")
def qwen3_tok():  # type: ignore[no-untyped-def]
    return voc.qwen()


@pytest.fixture(scope="session")
def plain_tok():  # type: ignore[no-untyped-def]
    return voc.qwen1()
