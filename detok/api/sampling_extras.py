"""A request's sampling knobs beyond temperature / top-p / top-k (`min_p`, the three penalties,
`logit_bias`, `allowed_token_ids`, `bad_words` tokenized here), checked and carried to the scheduler as `SamplingExtras` (None when all are
vLLM's defaults: the common request carries nothing more)."""

from __future__ import annotations

import math

from detok.api import limits
from detok.api.errors import RequestError
from detok.api.openai_requests import _SamplingRequest
from detok.tokenizer.base import Tokenizer
from detok.wire.to_scheduler import SamplingExtras


def _logit_bias(bias: dict[str, float] | None, tok: Tokenizer) -> tuple[tuple[int, float], ...]:
    if not bias:
        return ()
    if len(bias) > limits.MAX_LOGIT_BIAS:
        raise RequestError(f"logit_bias: at most {limits.MAX_LOGIT_BIAS} entries are allowed", "logit_bias")
    pairs = []
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit() and int(key) < tok.vocab_size):
            raise RequestError(f"logit_bias: {key!r} is not a token id of the vocabulary (size {tok.vocab_size})",
                               "logit_bias")
        # a bias past +-LOGIT_BIAS_RANGE counts as that bound: vLLM's SamplingParams.from_optional
        # clamps it (to OpenAI's range) rather than refusing it; NaN has no place in the range
        if math.isnan(value):
            raise RequestError(f"logit_bias: bias for token {key} is not a number", "logit_bias")
        pairs.append((int(key), max(-limits.LOGIT_BIAS_RANGE, min(limits.LOGIT_BIAS_RANGE, value))))
    return tuple(pairs)


def _bad_words(words: list[str] | None, tok: Tokenizer) -> tuple[tuple[int, ...], ...]:
    """Each word's ids, and those of it after a space where that is another first token of the
    same length: vLLM's `SamplingParams.update_from_tokenizer` (a word banned at the start and in
    the middle of text)."""
    out: list[tuple[int, ...]] = []
    for word in words or ():
        if not word.strip():
            raise RequestError("bad_words: a word must have a character other than whitespace", "bad_words")
        plain = tuple(tok.encode(word.lstrip(), add_special_tokens=False))
        spaced = tuple(tok.encode(" " + word.lstrip(), add_special_tokens=False))
        if not plain:  # (no ids at all: nothing to ban)
            continue
        out.append(plain)
        if spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
            out.append(spaced)
    return tuple(out)


def check_ids(ids: list[int], tok: Tokenizer, param: str) -> None:
    """RequestError naming `param` for the first id outside the vocabulary."""
    bad = next((i for i in ids if not 0 <= i < tok.vocab_size), None)
    if bad is not None:
        raise RequestError(f"{param}: token id {bad} is outside the vocabulary (size {tok.vocab_size})", param)


def sampling_extras(req: _SamplingRequest, tok: Tokenizer) -> SamplingExtras | None:
    """The request's extras (their ranges are the request model's), or None if all are defaults."""
    check_ids(req.allowed_token_ids or [], tok, "allowed_token_ids")
    extras = SamplingExtras(
        min_p=req.min_p or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty if req.repetition_penalty is not None else 1.0,
        logit_bias=_logit_bias(req.logit_bias, tok),
        allowed_token_ids=tuple(req.allowed_token_ids or ()),
        bad_words=_bad_words(req.bad_words, tok),
    )
    return None if extras == _DEFAULTS else extras


_DEFAULTS = SamplingExtras()
