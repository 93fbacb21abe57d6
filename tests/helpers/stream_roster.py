"""Every real tokenizer the project tests with, loaded once per test session, for the stream tests."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import detok
import tests.helpers.tokenizers_available as ta
from detok.tokenizer.base import Tokenizer


def _gemma4_tokenizer_json() -> Tokenizer:
    """Gemma 4's tokenizer.json form (no package ships one): built from the GGUF's vocabulary."""
    gguf_tok = get("gguf-gemma-4")
    folder = Path(tempfile.mkdtemp(prefix="detok-gemma4-"))
    atexit.register(shutil.rmtree, folder, True)
    (folder / "tokenizer.json").write_text(gguf_tok.hf_tokenizer.to_str(), encoding="utf-8")  # type: ignore[attr-defined]
    return detok.load_tokenizer(str(folder))


def _python_user() -> Tokenizer:
    return detok.load_tokenizer("tests.helpers.user_tokenizers:QwenViaPython")  # one import name: the package path


SOURCES: dict[str, Callable[[], Tokenizer]] = {
    "qwen2": lambda: detok.load_tokenizer(str(ta.hf_qwen2_dir())),
    "gpt2": lambda: detok.load_tokenizer(str(ta.hf_gpt2_dir())),
    "llama3": lambda: detok.load_tokenizer(str(ta.llama3_tokenizer_json())),
    "deepseek": lambda: detok.load_tokenizer(str(ta.deepseek_dir())),
    "llama3-tiktoken": lambda: detok.load_tokenizer(str(ta.llama3_tiktoken_model())),
    "cl100k": lambda: detok.load_tokenizer(str(ta.cl100k_file())),
    "mistral-spm-v1": lambda: detok.load_tokenizer(str(ta.mistral_spm(1))),
    "mistral-spm-v7": lambda: detok.load_tokenizer(str(ta.mistral_spm(7))),
    "mistral-tekken": lambda: detok.load_tokenizer(str(ta.mistral_tekken())),
    "spm-botchan-bpe": lambda: detok.load_tokenizer(str(ta.spm_fixture("botchan_en_bpe_1000"))),
    "spm-botchan-unigram": lambda: detok.load_tokenizer(str(ta.spm_fixture("botchan_en_unigram_1000"))),
    "spm-kyoto-unigram": lambda: detok.load_tokenizer(str(ta.spm_fixture("kyoto_ja_unigram_8000"))),
    "gguf-gpt-2": lambda: detok.load_tokenizer(str(ta.gguf_fixture("gpt-2"))),
    "gguf-llama-bpe": lambda: detok.load_tokenizer(str(ta.gguf_fixture("llama-bpe"))),
    "gguf-qwen2": lambda: detok.load_tokenizer(str(ta.gguf_fixture("qwen2"))),
    "gguf-deepseek-llm": lambda: detok.load_tokenizer(str(ta.gguf_fixture("deepseek-llm"))),
    "gguf-llama-spm": lambda: detok.load_tokenizer(str(ta.gguf_fixture("llama-spm"))),
    "gguf-phi-3": lambda: detok.load_tokenizer(str(ta.gguf_fixture("phi-3"))),
    "gguf-bert-bge": lambda: detok.load_tokenizer(str(ta.gguf_fixture("bert-bge"))),
    "gguf-gemma-4": lambda: detok.load_tokenizer(str(ta.gguf_fixture("gemma-4"))),
    "hf-gemma-4": _gemma4_tokenizer_json,
    "python-user": _python_user,
    "mock": lambda: detok.load_tokenizer("mock"),
}

_cache: dict[str, Tokenizer] = {}


def get(name: str) -> Tokenizer:
    tok = _cache.get(name)
    if tok is None:
        try:
            tok = _cache[name] = SOURCES[name]()
        except pytest.skip.Exception:
            raise
    return tok


NAMES = list(SOURCES)
