"""The word-splitting regexes of GGUF BPE vocabularies, by `tokenizer.ggml.pre` name.

llama.cpp (src/llama-vocab.cpp) keeps one regex list per pre-tokenizer type; the lists are the
`Split` patterns of the models' original tokenizer.json, so the HF `tokenizers` engine (Oniguruma)
reproduces them. Where llama.cpp rewrote `(?i:...)` for its own engine, the original form is used.
"""

from __future__ import annotations

import dataclasses

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# deepseek-llm's letter class, written as escapes: editors and copy/paste NFC-normalize some of its
# characters (U+1F7D, U+1FBE, U+2126, U+212A ...) into other code points and break the ranges
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1"
    "\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5"
    "\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
    "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
    "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3"
    "\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115"
    "\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_CJK_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LLM = (
    "[\r\n]",
    r"\s?[" + _DEEPSEEK_LETTERS + "]+",
    r"\s?[!-/:-~" + "\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002" + "]+",
    r"\s+$",
    _CJK_HANGUL,
    r"\p{N}+",
)
_DEEPSEEK_CODER = ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}")
_DEEPSEEK_V3 = (
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    '[!"#$%&' + r"'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)


def _cased_words(suffix: str) -> str:
    """tekken and gpt-4o words: an upper-case run may only start a word."""
    upper, lower = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
    lead = r"[^\r\n\p{L}\p{N}]?"
    return f"{lead}{upper}*{lower}+{suffix}|{lead}{upper}+{lower}*{suffix}"


_TEKKEN = _cased_words("") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_GPT4O = (
    _cased_words(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?")
    + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SEED_CODER = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_BAILINGMOE = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
)
_TINY_AYA = (r"\d{1,3}(?=(?:\d{3})*\b)", _GPT4O)
_YOUTU = (
    "[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
    "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    _cased_words(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
_SPARK2_5 = (
    _DEEPSEEK_V3[0],
    _DEEPSEEK_V3[1],
    '[!"#$%&' + r"'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+",
    r"\p{N}",
)
_MINICPM5 = (
    r"\p{N}{1,3}",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
_JAIS2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4))
    + r"|\s{1,2}(?!\S)|\s{1}"
)
_EXAONE_MOE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"
)
_UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_CHAMELEON = (
    r"<sentinel:[0-9]+>",
    r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\t\n]|    |  )",
    r"\p{N}",
    r"[\p{P}!-/:-@\[-`{-~]",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
)
_LINES = r"[^\n]+|[\n]+"  # SentencePiece-style BPE: only newlines split the text
_BLOOM = r" ?[^(\s|.,!?" + "\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c" + ")]+"
_DEFAULT = (
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
)


@dataclasses.dataclass(frozen=True)
class BPEPreTokenizer:
    """How llama.cpp pre-tokenizes one family of BPE vocabularies."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is itself a token is not merged (Llama 3)
    add_bos: bool = False  # llama.cpp's default when the file has no add_bos_token
    add_sep: bool = False
    # SentencePiece-style BPE (Gemma 4): spaces are ▁ in the pieces, merges run over raw UTF-8
    # (not GPT-2's byte alphabet), <0xXX> byte fallback
    spm_style: bool = False
    force_add_bos: bool = False  # llama.cpp adds BOS whatever the file says (Gemma 4)


def _family(names: str, spec: BPEPreTokenizer) -> dict[str, BPEPreTokenizer]:
    return {name: spec for name in names.split()}


PRE_TOKENIZERS: dict[str, BPEPreTokenizer] = {
    **_family("default", BPEPreTokenizer(_DEFAULT)),
    **_family(
        "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
        BPEPreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True),
    ),
    **_family("dbrx smaug-bpe chatglm-bpe glm4", BPEPreTokenizer((_LLAMA3,))),
    **_family("deepseek-llm", BPEPreTokenizer(_DEEPSEEK_LLM)),
    **_family("deepseek-coder", BPEPreTokenizer(_DEEPSEEK_CODER)),
    **_family("deepseek-v3 hunyuan-dense joyai-llm hy_v4", BPEPreTokenizer(_DEEPSEEK_V3)),
    **_family(
        "falcon",
        BPEPreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    ),
    **_family(
        "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
        BPEPreTokenizer((r"\p{N}", _GPT2)),
    ),
    **_family(
        "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert"
        " mpt olmo jais trillion granite-docling exaone4",
        BPEPreTokenizer((_GPT2,)),
    ),
    **_family("jina-v1-en jina-v2-code roberta-bpe", BPEPreTokenizer((_GPT2,), add_sep=True)),
    **_family(
        "qwen2 deepseek-r1-qwen kormo f2llmv2 stablelm2 megrez hunyuan solar-open grok-2",
        BPEPreTokenizer((_QWEN2,)),
    ),
    **_family("qwen35", BPEPreTokenizer((_QWEN35,))),
    **_family("poro-chat bloom gpt3-finnish", BPEPreTokenizer((_BLOOM,))),
    **_family("viking", BPEPreTokenizer((_BLOOM, r"\p{N}"))),
    **_family("tekken", BPEPreTokenizer((_TEKKEN,), ignore_merges=True, add_bos=True)),
    **_family("gpt-4o llama4 kanana2 talkie minimax-m2", BPEPreTokenizer((_GPT4O,))),
    **_family("tiny_aya cohere2moe", BPEPreTokenizer(_TINY_AYA)),
    **_family("seed-coder", BPEPreTokenizer((_SEED_CODER,))),
    **_family("bailingmoe bailingmoe2 llada-moe", BPEPreTokenizer((_BAILINGMOE,))),
    **_family("minicpm5", BPEPreTokenizer(_MINICPM5, ignore_merges=True)),
    **_family("spark2_5", BPEPreTokenizer(_SPARK2_5)),
    **_family("youtu", BPEPreTokenizer(_YOUTU, ignore_merges=True)),
    **_family("jais-2", BPEPreTokenizer((_JAIS2,))),
    **_family("exaone-moe", BPEPreTokenizer((_EXAONE_MOE,))),
    **_family("ufakzeka", BPEPreTokenizer((_UFAKZEKA,))),
    **_family("laguna", BPEPreTokenizer((_LINES, _QWEN2))),
    **_family("chameleon", BPEPreTokenizer(_CHAMELEON, add_bos=True)),
    **_family("granite-embed-multi-97m", BPEPreTokenizer((_GPT4O,), ignore_merges=True)),
    **_family("superbpe", BPEPreTokenizer((r"\p{N}+", r"(?=(\d{3})+(?!\d))"))),
    **_family(
        "gemma4 granite-embed-multi-311m",
        BPEPreTokenizer((_LINES,), spm_style=True, add_bos=True, force_add_bos=True),
    ),
    **_family("sarvam-moe", BPEPreTokenizer((_LINES,), spm_style=True)),
}

# Accepted by llama.cpp but with rules detok does not reproduce: loading them fails naming the reason.
UNSUPPORTED_PRE_TOKENIZERS = {
    "kimi-k2": "a custom pre-tokenizer (Han-script rules hand-written in llama.cpp's unicode.cpp)",
    "afmoe": "a custom pre-tokenizer (digit grouping hand-written in llama.cpp's unicode.cpp)",
    "whitespace": "an embedding-only whitespace splitter (jina-embeddings-v2-base-zh)",
}
