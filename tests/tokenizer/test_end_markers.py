"""A bare tokenizer.json holding Harmony's markers: `<|end|>` closes a message, not the reply, so it is
no eos (a gpt-oss reply would stop after its analysis channel); `<|return|>` and `<|call|>` are. The
Hugging Face and GGUF loaders apply the one rule (`detok.tokenizer.end_markers`) and agree, on GPT-2's
real vocabulary (fixture) with the formats' special tokens added."""

from __future__ import annotations

from pathlib import Path

import pytest
import tokenizers
from gguf import TokenType

from detok.tokenizer.gguf_vocab import EOG_TEXTS, _mark_end_of_generation
from detok.tokenizer.hf import HFTokenizer
from tests.helpers.tokenizers_available import hf_gpt2_dir

HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|endoftext|>")
SOLAR = ("<|end|>", "<|calls|>", "<|flush|>", "<|endoftext|>")
PHI3 = ("<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>")


def _bare(tmp_path: Path, specials: tuple[str, ...]) -> HFTokenizer:
    tok = tokenizers.Tokenizer.from_file(str(hf_gpt2_dir() / "tokenizer.json"))
    tok.add_special_tokens([t for t in specials if tok.token_to_id(t) is None])
    path = tmp_path / "tokenizer.json"  # no tokenizer_config.json: no config names the eos
    tok.save(str(path))
    return HFTokenizer.from_path(path)


def _eos_texts(tok: HFTokenizer) -> set[str]:
    return {tok.id_to_token(i) for i in tok.eos_token_ids}


def test_a_harmony_reply_ends_on_return_or_call_not_end(tmp_path: Path) -> None:
    tok = _bare(tmp_path, HARMONY)
    assert _eos_texts(tok) == {"<|return|>", "<|call|>", "<|endoftext|>"}
    assert tok.special_tokens.eos == "<|return|>"  # the primary eos: a finished reply


@pytest.mark.parametrize("specials", [HARMONY, SOLAR, PHI3], ids=["harmony", "solar_open", "phi3"])
def test_the_two_loaders_agree(tmp_path: Path, specials: tuple[str, ...]) -> None:
    hf_eos = _eos_texts(_bare(tmp_path, specials))
    tokens = list(specials)
    types = [int(TokenType.USER_DEFINED)] * len(tokens)
    _mark_end_of_generation(tokens, types)
    gguf_eos = {t for t, k in zip(tokens, types, strict=True) if t in EOG_TEXTS and k == TokenType.CONTROL}
    assert hf_eos == gguf_eos
    assert ("<|end|>" in hf_eos) is (specials is PHI3)  # a Phi-3 turn does end on <|end|>

