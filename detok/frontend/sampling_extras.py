"""A request's sampling knobs beyond temperature / top-p / top-k (`min_p`, the three penalties,
`logit_bias`), checked and carried to the scheduler as `SamplingExtras` (None when all are
vLLM's defaults: the common request carries nothing more)."""

from __future__ import annotations

import math

from detok.frontend import limits
from detok.frontend.errors import RequestError
from detok.frontend.openai_requests import _SamplingRequest
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


def sampling_extras(req: _SamplingRequest, tok: Tokenizer) -> SamplingExtras | None:
    """The request's extras (their ranges are the request model's), or None if all are defaults."""
    extras = SamplingExtras(
        min_p=req.min_p or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty if req.repetition_penalty is not None else 1.0,
        logit_bias=_logit_bias(req.logit_bias, tok),
    )
    return None if extras == _DEFAULTS else extras


_DEFAULTS = SamplingExtras()
