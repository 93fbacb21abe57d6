"""A prompt's ids with its pieces between added tokens memoized (`SegmentedEncoder`) are exactly
`tokenizers`' ids of the whole text, on real vocabularies, for any mix of text and the added tokens'
contents (each text encoded twice: the second time from the cache); tokenizers whose cut is not
plain string matching, or whose pre-tokenizer marks a piece by its place, are left alone; the cache
is bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.helpers.tokenizers_available as ta
from detok.tokenizer import segment_cache
from detok.tokenizer.hf import HFTokenizer
from detok.tokenizer.segment_cache import SegmentedEncoder

_SOURCES = {
    "qwen2": lambda: HFTokenizer.from_path(ta.hf_qwen2_dir()),
    "gpt-2": lambda: HFTokenizer.from_path(ta.hf_gpt2_dir()),
    "llama3": lambda: HFTokenizer.from_path(ta.llama3_tokenizer_json()),
    "deepseek": lambda: HFTokenizer.from_path(ta.deepseek_dir()),
}
_LOADED: dict[str, HFTokenizer] = {}


def _tok(name: str) -> HFTokenizer:
    if name not in _LOADED:
        _LOADED[name] = _SOURCES[name]()
    return _LOADED[name]


def _added(tok: HFTokenizer) -> list[str]:
    return sorted(t.content for t in tok.hf_tokenizer.get_added_tokens_decoder().values())


_WORDS = st.sampled_from(["\n", " ", "  ", "\n\n", "user", "assistant", " the", "Hello", "'s", "123", "é", "日本語",
                          "🙂", "\t", "<", "|", ">", "<|", "|>", "im_start", "_"])


def _texts(added: list[str]) -> st.SearchStrategy[str]:
    pieces = st.one_of(st.sampled_from(added), _WORDS, st.text(max_size=12))
    return st.lists(pieces, max_size=24).map("".join)


@pytest.mark.parametrize("name", list(_SOURCES))
def test_segmented_ids_are_tokenizers_ids(name: str) -> None:
    tok = _tok(name)
    encoder = SegmentedEncoder.of(tok.hf_tokenizer)
    assert encoder is not None, f"{name}: expected a plain cut"
    hf = tok.hf_tokenizer

    @settings(max_examples=150, deadline=None)
    @given(text=_texts(_added(tok)))
    def check(text: str) -> None:
        want = hf.encode(text, add_special_tokens=False).ids
        assert encoder.encode(text) == want
        assert encoder.encode(text) == want  # (from the cache)
        assert tok.encode_prompt(text) == want

    check()


def test_a_chat_prompt_repeats_its_pieces() -> None:
    tok = _tok("qwen2")
    encoder = SegmentedEncoder.of(tok.hf_tokenizer)
    assert encoder is not None
    for k in range(20):
        text = tok.apply_chat_template([{"role": "user", "content": f"request {k}: tell me a story."}],
                                       add_generation_prompt=True)
        assert encoder.encode(text) == tok.hf_tokenizer.encode(text, add_special_tokens=False).ids
    info = encoder.cache_info()
    assert info.hits >= 3 * 19 and info.currsize <= 4 + 20  # (the system prompt, role headers, newlines: hits)


def _json_edited(tok: HFTokenizer, edit: Any) -> tokenizers.Tokenizer:
    spec = json.loads(tok.hf_tokenizer.to_str())
    edit(spec)
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def _lstrip(spec: dict[str, Any]) -> None:
    spec["added_tokens"][0]["lstrip"] = True


def _metaspace(spec: dict[str, Any]) -> None:
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}


def _nfc(spec: dict[str, Any]) -> None:
    spec["normalizer"] = {"type": "NFC"}


@pytest.mark.parametrize("edit", [_lstrip, _metaspace, _nfc], ids=["lstrip", "metaspace-first", "normalizer"])
def test_a_cut_that_is_not_plain_matching_is_left_alone(edit: Any) -> None:
    hf = _json_edited(_tok("qwen2"), edit)
    assert SegmentedEncoder.of(hf) is None
    wrapped = HFTokenizer(hf, "edited")
    text = "<|im_start|>user\n hi <|im_end|>\n"
    assert wrapped.encode_prompt(text) == hf.encode(text, add_special_tokens=False).ids


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_cache, "SEGMENT_CACHE_ENTRIES", 8)
    monkeypatch.setattr(segment_cache, "SEGMENT_CACHE_MAX_CHARS", 50)
    hf = _tok("qwen2").hf_tokenizer
    encoder = SegmentedEncoder.of(hf)
    assert encoder is not None
    for k in range(40):
        encoder.encode(f"<|im_start|>piece {k}<|im_end|>")
    assert encoder.cache_info().currsize == 8
    long = "word " * 20  # over the per-piece limit: encoded, not kept
    before = encoder.cache_info()
    assert encoder.encode(long) == hf.encode(long, add_special_tokens=False).ids
    after = encoder.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)


def test_overlapping_added_tokens_are_cut_leftmost_longest() -> None:
    """As `tokenizers`' trie: at the leftmost match, the longest added token."""
    hf = tokenizers.Tokenizer.from_str(_tok("qwen2").hf_tokenizer.to_str())
    hf.add_special_tokens(["<x>", "<x>y", "y<z>", "<z>", "<z>w<z>"])
    encoder = SegmentedEncoder.of(hf)
    assert encoder is not None
    for text in ["<x>y<z>", "a<x>yy<z>", "<x><x>y", "y<z>w<z>", "<z>w<z>w<z>", "q<x>y<z>w<z>"]:
        assert encoder.encode(text) == hf.encode(text, add_special_tokens=False).ids, text
