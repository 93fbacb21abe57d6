"""The tokenizer part of GGUF metadata, with llama.cpp's defaults filled in (src/llama-vocab.cpp)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from gguf import Keys, TokenType

from detok.tokenizer.end_markers import ends_only_a_message
from detok.tokenizer.gguf_pretokenizers import PRE_TOKENIZERS, UNSUPPORTED_PRE_TOKENIZERS

# tokenizer.ggml.model -> llama.cpp's vocabulary type ("gemma4": BPE over SentencePiece-style pieces)
VOCAB_TYPES = {"llama": "spm", "gpt2": "bpe", "bert": "wpm", "t5": "ugm", "gemma4": "bpe"}
# the other vocabularies llama.cpp loads, and why detok does not
UNSUPPORTED_VOCAB_TYPES = {
    "rwkv": "RWKV's trie tokenizer over escaped byte strings",
    "plamo2": "PLaMo-2's Aho-Corasick unigram tokenizer",
    "hybriddna": "BPE with DNA k-mer segments between <dna> tags",
    "whitespace": "an embedding-only whitespace splitter (jina-embeddings-v2-base-zh)",
    "no_vocab": "no vocabulary (the model takes token ids only)",
    "none": "no vocabulary (the model takes token ids only)",
}

# llama.cpp marks these as end-of-generation (and control) by their text, whatever the file says.
# (It lists "</s>" too, for paddleocr only, and takes it out again for Gemma 4: left out here.)
EOG_TEXTS = frozenset(
    (
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
    )
)

_SPECIAL_ID_KEYS = {
    "bos": Keys.Tokenizer.BOS_ID,
    "eos": Keys.Tokenizer.EOS_ID,
    "unk": Keys.Tokenizer.UNK_ID,
    "sep": Keys.Tokenizer.SEP_ID,
    "pad": Keys.Tokenizer.PAD_ID,
    "mask": Keys.Tokenizer.MASK_ID,
    "cls": "tokenizer.ggml.cls_token_id",  # written by older BERT conversions
    "eot": Keys.Tokenizer.EOT_ID,
    "eom": Keys.Tokenizer.EOM_ID,
}

# llama.cpp's per-type defaults: special ids, then add_bos / add_eos / add_sep / add_space_prefix
_DEFAULT_IDS: dict[str, dict[str, int]] = {
    "spm": {"bos": 1, "eos": 2, "unk": 0},
    "wpm": {"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103},
    "bpe": {},  # llama.cpp's 11 is a placeholder that names an ordinary token in most vocabularies
    # (and its chatglm rule "no bos" is then the default)
    "ugm": {"eos": 1, "unk": 2, "pad": 0},
}
_DEFAULT_FLAGS = {  # add_bos, add_eos, add_sep, add_space_prefix
    "spm": (True, False, False, True),
    "wpm": (True, False, True, False),
    "bpe": (False, False, False, False),
    "ugm": (False, True, False, False),
}


class VocabError(ValueError):
    """The metadata does not describe a vocabulary detok can build."""


@dataclasses.dataclass(frozen=True)
class GGUFVocab:
    kind: str  # "spm" | "bpe" | "wpm" | "ugm"
    model: str  # tokenizer.ggml.model
    pre: str  # tokenizer.ggml.pre ("default" when absent)
    tokens: list[str]
    types: list[int]
    scores: list[float]
    merges: list[str]
    special_ids: dict[str, int]  # bos, eos, unk, sep, pad, mask, cls, eot, eom -> id, when known
    add_bos: bool
    add_eos: bool
    add_sep: bool
    add_space_prefix: bool
    remove_extra_whitespaces: bool
    precompiled_charsmap: bytes
    chat_template: str | None


def _array(metadata: dict[str, Any], key: str, n: int | None, kind: type | tuple[type, ...]) -> list[Any] | None:
    """An array value as a list (its first `n` items), checked to hold `kind` items."""
    value = metadata.get(key)
    if value is None:
        return None
    items = value.tolist() if isinstance(value, np.ndarray) else value
    if not isinstance(items, list) or not all(isinstance(v, kind) for v in items):
        raise VocabError(f"{key} is not an array of the expected type")
    if n is not None and len(items) < n:
        raise VocabError(f"{key} has {len(items)} entries for {n} tokens")
    return items[:n] if n is not None else items


def _charsmap(metadata: dict[str, Any]) -> bytes:
    value = metadata.get(Keys.Tokenizer.PRECOMPILED_CHARSMAP)
    if value is None:
        return b""
    if not isinstance(value, np.ndarray) or value.dtype.itemsize != 1:
        raise VocabError("tokenizer.ggml.precompiled_charsmap is not a byte array")
    return value.tobytes()


def _flag(metadata: dict[str, Any], key: str, default: bool) -> bool:
    value = metadata.get(key)
    return bool(value) if isinstance(value, bool | int) else default


def _mark_end_of_generation(tokens: list[str], types: list[int]) -> None:
    """Tokens llama.cpp treats as end of generation become control, except a `<|end|>` that only ends
    a message (`detok.tokenizer.end_markers`): user-defined."""
    present = set(tokens) & EOG_TEXTS
    for i, t in enumerate(tokens):
        if t in present:
            if ends_only_a_message(t, present.__contains__):
                types[i] = int(TokenType.USER_DEFINED)
            elif types[i] != TokenType.CONTROL:
                types[i] = int(TokenType.CONTROL)


def vocab_from_metadata(metadata: dict[str, Any]) -> GGUFVocab:
    model = metadata.get(Keys.Tokenizer.MODEL)
    if not isinstance(model, str):
        raise VocabError("no tokenizer.ggml.model key: the file holds no vocabulary")
    kind = VOCAB_TYPES.get(model)
    if kind is None:
        known = ", ".join(f"{m} ({k.upper()})" for m, k in VOCAB_TYPES.items())
        why = UNSUPPORTED_VOCAB_TYPES.get(model, "not a vocabulary type llama.cpp knows")
        raise VocabError(f"unsupported vocabulary type tokenizer.ggml.model={model!r}: {why} (supported: {known})")
    tokens = _array(metadata, Keys.Tokenizer.LIST, None, str)
    if not tokens:
        raise VocabError("no tokenizer.ggml.tokens: the file holds no vocabulary")
    n = len(tokens)
    types = _array(metadata, Keys.Tokenizer.TOKEN_TYPE, n, int) or [int(TokenType.NORMAL)] * n
    scores = _array(metadata, Keys.Tokenizer.SCORES, n, (int, float)) or [0.0] * n
    merges = _array(metadata, Keys.Tokenizer.MERGES, None, str) or []
    if kind == "bpe" and not merges:
        raise VocabError("BPE vocabulary without tokenizer.ggml.merges")
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]  # as llama.cpp does
    _mark_end_of_generation(tokens, types)

    special_ids = dict(_DEFAULT_IDS[kind])
    for name, key in _SPECIAL_ID_KEYS.items():
        value = metadata.get(key)
        if isinstance(value, int) and 0 <= value < n:  # out-of-range ids keep the default, as llama.cpp
            special_ids[name] = value
    special_ids = {k: v for k, v in special_ids.items() if v < n}
    add_bos, add_eos, add_sep, add_space_prefix = _DEFAULT_FLAGS[kind]
    pre = metadata.get(Keys.Tokenizer.PRE)
    pre = pre if isinstance(pre, str) and pre else "default"
    if model == "gemma4":
        pre = "gemma4"  # llama.cpp ignores the file's value for this model
    force_bos = False
    if kind == "bpe":
        spec = PRE_TOKENIZERS.get(pre)
        if spec is None:
            why = UNSUPPORTED_PRE_TOKENIZERS.get(pre, "not a pre-tokenizer llama.cpp knows")
            raise VocabError(f"unsupported BPE pre-tokenizer tokenizer.ggml.pre={pre!r}: {why}")
        add_bos, add_sep, force_bos = spec.add_bos, spec.add_sep, spec.force_add_bos
    template = metadata.get(Keys.Tokenizer.CHAT_TEMPLATE)
    return GGUFVocab(
        kind=kind,
        model=model,
        pre=pre,
        tokens=tokens,
        types=[int(t) for t in types],
        scores=[float(s) for s in scores],
        merges=merges,
        special_ids=special_ids,
        add_bos=force_bos or _flag(metadata, Keys.Tokenizer.ADD_BOS, add_bos),
        add_eos=_flag(metadata, Keys.Tokenizer.ADD_EOS, add_eos),
        add_sep=_flag(metadata, Keys.Tokenizer.ADD_SEP, add_sep),
        add_space_prefix=_flag(metadata, Keys.Tokenizer.ADD_PREFIX, add_space_prefix),
        remove_extra_whitespaces=_flag(metadata, Keys.Tokenizer.REMOVE_EXTRA_WS, False),
        precompiled_charsmap=_charsmap(metadata),
        chat_template=template if isinstance(template, str) else None,
    )
