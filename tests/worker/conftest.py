"""Tokenizers the worker's logprob tests share: Qwen2's (byte-level BPE) and a SentencePiece GGUF
with byte-fallback pieces (the stream roster's: one load and decode plan per test process)."""

from __future__ import annotations

import pytest

import detok
import tests.helpers.stream_roster as stream_roster


@pytest.fixture(scope="session")
def qwen() -> detok.Tokenizer:
    return stream_roster.get("qwen2")


@pytest.fixture(scope="session")
def spm() -> detok.Tokenizer:
    return stream_roster.get("gguf-llama-spm")
