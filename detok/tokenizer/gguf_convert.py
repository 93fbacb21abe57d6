"""Build a Hugging Face `tokenizers.Tokenizer` from a GGUF vocabulary, one builder per llama.cpp type.

Each builder reproduces what llama.cpp does with the same metadata (src/llama-vocab.cpp), expressed
with the components the HF converters use for the original models, so encode and decode run in Rust.
"""

from __future__ import annotations

from collections.abc import Callable

from gguf import TokenType
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from detok.tokenizer.gguf_pretokenizers import PRE_TOKENIZERS
from detok.tokenizer.gguf_vocab import GGUFVocab, VocabError

SPACE = "\u2581"  # SentencePiece's visible space
_MERGEABLE = (TokenType.NORMAL, TokenType.UNUSED)


def _token_ids(tokens: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if ids.setdefault(tok, i) != i:
            raise VocabError(f"duplicate token {tok!r} at ids {ids[tok]} and {i}")
    return ids


def _has_byte_tokens(vocab: GGUFVocab) -> bool:
    return any(t == TokenType.BYTE for t in vocab.types)


def _unk(vocab: GGUFVocab, tokens: list[str]) -> str | None:
    unk = vocab.special_ids.get("unk")
    return tokens[unk] if unk is not None else None


def _spm_decoder(vocab: GGUFVocab) -> decoders.Decoder:
    """▁ back to spaces, <0xNN> back to bytes, and the prefix space removed: a per-token byte map."""
    parts = [decoders.Replace(SPACE, " ")]
    if _has_byte_tokens(vocab):
        parts.append(decoders.ByteFallback())
    parts.append(decoders.Fuse())
    if vocab.add_space_prefix:
        parts.append(decoders.Strip(" ", 1, 0))
    return decoders.Sequence(parts)


def _spm_merges(vocab: GGUFVocab, ids: dict[str, int]) -> list[tuple[str, str]]:
    """llama.cpp's SPM merges the adjacent pair whose joined text is the best-scored token, leftmost
    first; a BPE model does the same when its merges are all such pairs ranked by that score."""
    ranked: list[tuple[float, int, int, str, str]] = []
    for i, piece in enumerate(vocab.tokens):
        if vocab.types[i] not in _MERGEABLE:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            li, ri = ids.get(left), ids.get(right)
            if li is not None and ri is not None and vocab.types[li] in _MERGEABLE and vocab.types[ri] in _MERGEABLE:
                ranked.append((-vocab.scores[i], i, li, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def _build_spm(vocab: GGUFVocab) -> Tokenizer:
    ids = _token_ids(vocab.tokens)
    model = models.BPE(
        vocab=ids,
        merges=_spm_merges(vocab, ids),
        unk_token=_unk(vocab, vocab.tokens),
        fuse_unk=True,
        byte_fallback=_has_byte_tokens(vocab),
    )
    tok = Tokenizer(model)
    steps = [normalizers.Prepend(SPACE)] if vocab.add_space_prefix else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    tok.decoder = _spm_decoder(vocab)
    return tok


def _split_merge(line: str) -> tuple[str, str] | None:
    cut = line.find(" ", 1)  # from 1: a merge may start with a literal space
    return (line[:cut], line[cut + 1 :]) if cut > 0 else None


def _bpe_model(vocab: GGUFVocab, ids: dict[str, int], ignore_merges: bool, byte_fallback: bool = False) -> models.BPE:
    # the fast path assumes HF's rule, that both pieces and their join are tokens; llama.cpp also
    # tolerates merges that break it (they never yield a token), so those are dropped on failure
    fast = [tuple(m.split(" ", 1)) if m[:1] != " " else _split_merge(m) for m in vocab.merges]
    try:
        return models.BPE(vocab=ids, merges=fast, ignore_merges=ignore_merges, byte_fallback=byte_fallback)
    except Exception:
        pass
    valid = []
    for pair in map(_split_merge, vocab.merges):
        if pair is not None and pair[0] in ids and pair[1] in ids and pair[0] + pair[1] in ids:
            valid.append(pair)
    return models.BPE(vocab=ids, merges=valid, ignore_merges=ignore_merges, byte_fallback=byte_fallback)


def _build_bpe(vocab: GGUFVocab) -> Tokenizer:
    spec = PRE_TOKENIZERS[vocab.pre]
    ids = _token_ids(vocab.tokens)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
    if spec.spm_style:
        # (llama.cpp keeps a run of newlines whole when it is a token; merging by rank does that too
        # on Gemma 4's ranks, checked in the tests, so nothing more is needed here)
        model = _bpe_model(vocab, ids, spec.ignore_merges, _has_byte_tokens(vocab))
        tok = Tokenizer(model)
        tok.normalizer = normalizers.Replace(" ", SPACE)
        tok.pre_tokenizer = pre_tokenizers.Sequence(splits)
        parts = [decoders.Replace(SPACE, " ")]
        if _has_byte_tokens(vocab):
            parts.append(decoders.ByteFallback())
        tok.decoder = decoders.Sequence([*parts, decoders.Fuse()])
        return tok
    tok = Tokenizer(_bpe_model(vocab, ids, spec.ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def _wordpiece_tokens(vocab: GGUFVocab) -> list[str]:
    """llama.cpp stores BERT's "word" as "▁word" and "##ing" as "ing"; [CLS]-like tokens stay as is."""
    out = []
    for tok in vocab.tokens:
        if tok.startswith(SPACE):
            out.append(tok[len(SPACE) :])
        elif tok.startswith("[") and tok.endswith("]"):
            out.append(tok)
        else:
            out.append("##" + tok)
    return out


def _build_wpm(vocab: GGUFVocab) -> Tokenizer:
    tokens = _wordpiece_tokens(vocab)
    model = models.WordPiece(vocab=_token_ids(tokens), unk_token=_unk(vocab, tokens) or "[UNK]")
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


def _build_ugm(vocab: GGUFVocab) -> Tokenizer:
    """SentencePiece unigram: charsmap normalization, whitespace rules, Viterbi over the whole text."""
    unk = vocab.special_ids.get("unk")
    model = models.Unigram(
        vocab=list(zip(vocab.tokens, vocab.scores)), unk_id=unk, byte_fallback=_has_byte_tokens(vocab)
    )
    tok = Tokenizer(model)
    steps: list[normalizers.Normalizer] = []
    if vocab.precompiled_charsmap:
        steps.append(normalizers.Precompiled(vocab.precompiled_charsmap))
    if vocab.remove_extra_whitespaces:  # only ' ' counts, as in SentencePiece (the charsmap maps \t, \n)
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Replace(Regex(r"\A +| +\z"), "")]
    if vocab.add_space_prefix:
        steps.append(normalizers.Prepend(SPACE))
    steps.append(normalizers.Replace(" ", SPACE))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = _spm_decoder(vocab)
    return tok


_BUILDERS: dict[str, Callable[[GGUFVocab], Tokenizer]] = {
    "spm": _build_spm,
    "bpe": _build_bpe,
    "wpm": _build_wpm,
    "ugm": _build_ugm,
}


def _add_tokens_by_type(tok: Tokenizer, vocab: GGUFVocab, tokens: list[str]) -> None:
    """Control and unknown tokens become special added tokens (skipped on decode); user-defined ones
    plain added tokens, matched in the text before the model as llama.cpp does."""
    special, user = [], []
    for i, t in enumerate(vocab.types):
        if t in (TokenType.CONTROL, TokenType.UNKNOWN):
            special.append(AddedToken(tokens[i], special=True, normalized=False))
        elif t == TokenType.USER_DEFINED:
            user.append(AddedToken(tokens[i], special=False, normalized=False))
    tok.add_special_tokens(special)
    tok.add_tokens(user)


def _post_processor(vocab: GGUFVocab, tokens: list[str]) -> processors.PostProcessor:
    """add_special_tokens=True adds what llama.cpp adds: bos, then eos and/or sep at the end."""
    ids = vocab.special_ids
    wanted_prefix = [ids["bos"]] if vocab.add_bos and "bos" in ids else []
    wanted_suffix = [ids[k] for k, on in (("eos", vocab.add_eos), ("sep", vocab.add_sep)) if on and k in ids]
    prefix = [tokens[i] for i in wanted_prefix]
    suffix = [tokens[i] for i in wanted_suffix]
    single = [*prefix, "$A:0", *suffix]
    pair = [*single, *(f"{t}:1" for t in prefix), "$B:1", *(f"{t}:1" for t in suffix)]
    specials = [(tokens[i], i) for i in dict.fromkeys(wanted_prefix + wanted_suffix)]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


def build_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    tok = _BUILDERS[vocab.kind](vocab)
    tokens = _wordpiece_tokens(vocab) if vocab.kind == "wpm" else vocab.tokens
    _add_tokens_by_type(tok, vocab, tokens)
    tok.post_processor = _post_processor(vocab, tokens)
    return tok
