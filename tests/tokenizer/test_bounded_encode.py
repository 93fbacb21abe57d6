"""encode_within on real tokenizers: a prompt that may fit gets exactly `encode`'s ids; a prompt
far past the limit is refused after counting a bounded part of it, and never one that fits."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.tokenizer.base import Tokenizer
from detok.tokenizer.bounded import CHUNK_CHARS, CHUNKS_PER_CALL, TooLong, encode_within
from detok.tokenizer.factory import load_tokenizer
from tests.helpers.tokenizers_available import corpus_text, gguf_fixture, hf_gpt2_dir, hf_qwen2_dir, spm_fixture

_SOURCES = {
    "hf-qwen2": lambda: hf_qwen2_dir(),
    "hf-gpt2": lambda: hf_gpt2_dir(),
    "gguf-llama-spm": lambda: gguf_fixture("llama-spm"),
    "spm-bpe": lambda: spm_fixture("botchan_en_bpe_1000"),
    "mock": lambda: "mock",
}
_cache: dict[str, Tokenizer] = {}


def _tok(name: str) -> Tokenizer:
    if name not in _cache:
        _cache[name] = load_tokenizer(str(_SOURCES[name]()))
    return _cache[name]


class _Counting:
    """A tokenizer wrapper that counts the characters handed to encode_batch."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok, self.chars = tok, 0

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        self.chars += sum(map(len, texts))
        return self.tok.encode_batch(texts, add_special_tokens=add_special_tokens)


def _long_text(chars: int) -> str:
    base = corpus_text() + "\n<|im_end|> 你好，世界！ The quick brown fox jumps over the lazy dog.\n"
    return (base * (chars // len(base) + 1))[:chars]


@pytest.mark.parametrize("name", list(_SOURCES))
def test_a_prompt_that_fits_gets_exactly_encodes_ids(name: str) -> None:
    tok = _tok(name)
    text = _long_text(140_000)  # counted in chunks (longer than 2 x the limit), then encoded whole
    want = tok.encode(text, add_special_tokens=True)
    got = encode_within(tok, text, len(want), add_special_tokens=True)
    assert got == want
    assert encode_within(tok, text[:5000], 32768) == tok.encode(text[:5000])


@pytest.mark.parametrize("name", list(_SOURCES))
def test_a_huge_prompt_is_refused_after_counting_a_bounded_part(name: str) -> None:
    tok = _tok(name)
    text = _long_text(3_800_000)
    counting = _Counting(tok)
    got = encode_within(counting, text, 32767)  # type: ignore[arg-type]
    assert isinstance(got, TooLong) and got.at_least > 32767
    # at most the chunks past the limit's worth of text plus one call's chunks were tokenized
    assert counting.chars <= 32767 * 8 + CHUNK_CHARS * CHUNKS_PER_CALL * 2
    assert counting.chars < len(text) // 4


@pytest.mark.ci_examples(12)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["hf-qwen2", "gguf-llama-spm", "spm-bpe"]),
    chars=st.integers(70_000, 200_000),
    shift=st.integers(0, 5000),
    margin=st.integers(-300, 300),
)
def test_refused_only_when_really_too_long(name: str, chars: int, shift: int, margin: int) -> None:
    tok = _tok(name)
    text = _long_text(chars + shift)[shift:]
    true = len(tok.encode(text))
    limit = max(1, true + margin)
    got = encode_within(tok, text, limit)
    if isinstance(got, TooLong):
        assert true > limit and got.at_least <= true + 64
    else:
        assert got == tok.encode(text)
