"""Shared helpers for the stream tests: the oracle, stepping in groupings, interesting ids."""

from __future__ import annotations

from collections.abc import Sequence

from detok import DecodeParams, DecodeStream, Finish
from detok.stream import prepare_decoding
from detok.tokenizer.base import Tokenizer, decode_added_raw

MULTILINGUAL = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "北京欢迎你。今日は良い天気ですね。안녕하세요 세계",
    "🫨👍🏽👨‍👩‍👧‍👦🏳️‍🌈 emoji with ZWJ and skin tones 🧑🏿‍🚀",
    "สวัสดีครับ ภาษาไทย",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, हिन्दी",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Ünïcödé ñ — «quotes» ‘single’ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ½ ∑ ∫",
    "  leading and   multiple   spaces\t\ttabs\n\nnewlines  ",
]


def oracle(tok: Tokenizer, ctx: Sequence[int], gen: Sequence[int], params: DecodeParams) -> tuple[str, str, str]:
    """(text(G), D(C), D(C+G)) per docs/tokenizers.md, without stop rules. With special tokens kept and
    spaces_between_special_tokens=False, D(C+G) applies vLLM's raw-added rule to G only."""
    kw = dict(
        skip_special_tokens=params.skip_special_tokens,
        spaces_between_special_tokens=params.spaces_between_special_tokens,
    )
    pre = tok.decode(list(ctx), **kw)
    if params.skip_special_tokens or params.spaces_between_special_tokens or tok.slow_special_spacing:
        full = tok.decode(list(ctx) + list(gen), **kw)
    else:
        full = decode_added_raw(tok, list(ctx) + list(gen), first=len(ctx))
    return full[len(pre) :], pre, full


def run_stream(
    tok: Tokenizer,
    ctx: Sequence[int],
    gen: Sequence[int],
    params: DecodeParams,
    groups: Sequence[int] = (),
    end: str = "length",
    ignore_eos: bool = True,
) -> tuple[list[str], Finish | None]:
    """Step `gen` in groups of the given sizes (cycled; 1 if empty); returns deltas and the finish."""
    stream = DecodeStream(tok, ctx, params, ignore_eos=ignore_eos)
    deltas: list[str] = []
    i = 0
    g = 0
    finish = None
    while i < len(gen):
        size = groups[g % len(groups)] if groups else 1
        g += 1
        d = stream.step(list(gen[i : i + size]))
        i += size
        deltas.append(d.text)
        if d.finish is not None:
            return deltas, d.finish
    d = stream.finish(end)
    deltas.append(d.text)
    return deltas, d.finish


def interesting_ids(tok: Tokenizer) -> list[int]:
    """Special ids, single-byte ids (byte fallback / partial UTF-8) and ids of multilingual text."""
    ids = set(tok.special_ids)
    plan = prepare_decoding(tok)
    decoding = plan.decoding
    if decoding is not None:
        for i, piece in enumerate(decoding.pieces):
            if len(piece) == 1 and piece[0] >= 0x80:
                ids.add(i)
    for text in MULTILINGUAL:
        ids.update(tok.encode(text))
    return sorted(i for i in ids if 0 <= i < tok.vocab_size)


def valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
