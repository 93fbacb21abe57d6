"""Tokenizers the worker's logprob tests share: Qwen2's (byte-level BPE) and a SentencePiece GGUF
with byte-fallback pieces."""

from __future__ import annotations

import pytest

import detok
from tests.helpers.tokenizers_available import gguf_fixture, hf_qwen2_dir


@pytest.fixture(scope="session")
def qwen() -> detok.Tokenizer:
    return detok.load_tokenizer(hf_qwen2_dir())


@pytest.fixture(scope="session")
def spm() -> detok.Tokenizer:
    return detok.load_tokenizer(str(gguf_fixture("llama-spm")))
