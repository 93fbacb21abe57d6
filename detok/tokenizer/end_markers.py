"""The one rule, shared by the loaders that find end-of-generation tokens by their text (GGUF always,
Hugging Face when no config names the eos): in a vocabulary whose replies end with their own tokens
(gpt-oss's Harmony: `<|return|>` and `<|call|>`; solar-open: `<|calls|>` and `<|flush|>`), `<|end|>`
only ends one message of a reply (an analysis channel before the final one), not the generation. It
is llama.cpp's rule; a loader that ended on `<|end|>` there would stop a gpt-oss reply after its
analysis."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

MESSAGE_END: Final = "<|end|>"
# the tokens that end a reply in formats whose replies hold several messages, each closed by <|end|>
REPLY_ENDS: Final = (("<|return|>", "<|call|>"), ("<|calls|>", "<|flush|>"))


def reply_ends(present: Callable[[str], bool]) -> tuple[str, ...]:
    """The reply-ending tokens of the multi-message format this vocabulary has (`present(text)`:
    the vocabulary holds that token), or ()."""
    for ends in REPLY_ENDS:
        if all(present(t) for t in ends):
            return ends
    return ()


def ends_only_a_message(text: str, present: Callable[[str], bool]) -> bool:
    """True for `<|end|>` in a vocabulary of a multi-message format: not an end of generation."""
    return text == MESSAGE_END and bool(reply_ends(present))


def end_of_generation(candidates: Iterable[str], present: Callable[[str], bool]) -> list[str]:
    """The end-of-generation tokens of this vocabulary, most preferred first: a multi-message format's
    reply ends, then the `candidates` it holds, without `<|end|>` where it only ends a message."""
    ends = list(reply_ends(present))
    ends += [t for t in candidates if present(t) and t not in ends and not ends_only_a_message(t, present)]
    return ends
