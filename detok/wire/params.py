"""Per-request decode parameters and what a decode step returns.

These are msgspec Structs because they travel on the wire (registration and delta messages).
"""

from __future__ import annotations

from typing import Literal

import msgspec

# the prompt tail a registration carries: it fixes the first delta's text (leading space, split characters)
CONTEXT_TOKENS = 5

FinishReason = Literal["stop", "length", "abort", "error"]


class DecodeParams(msgspec.Struct, frozen=True, array_like=True, gc=False, omit_defaults=True):
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    visible_stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    min_tokens: int = 0

    def __post_init__(self) -> None:
        # Validated where it is made (the frontend turns this into a 400), never downstream.
        if self.min_tokens < 0:
            raise ValueError("min_tokens must be >= 0")
        if not (self.stop or self.stop_token_ids or self.visible_stop_token_ids):
            return  # (every registration decodes one of these: the plain case costs three tests)
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise ValueError("stop strings must be non-empty strings")
        for i in (*self.stop_token_ids, *self.visible_stop_token_ids):
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise ValueError(f"stop token ids must be non-negative integers, got {i!r}")


class Finish(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Why a request ended. `matched` is the stop string or stop token id that ended it."""

    reason: FinishReason
    matched: str | int | None = None
    message: str | None = None


class Delta(msgspec.Struct, frozen=True, gc=False):
    """New text of one step; `finish` is set on the step that ends the request."""

    text: str = ""
    finish: Finish | None = None


EMPTY_DELTA = Delta()
