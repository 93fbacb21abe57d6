"""Streaming decode: token ids to exact text deltas, with stop rules."""

from detok.stream.decode_stream import CONTEXT_TOKENS, DecodeStream
from detok.wire.params import DecodeParams, Delta, Finish
from detok.stream.strategy import DecodePlan, prepare_decoding

__all__ = ["CONTEXT_TOKENS", "DecodeParams", "DecodePlan", "DecodeStream", "Delta", "Finish", "prepare_decoding"]
