"""Tokenize a prompt only as far as needed to know whether it fits the context.

A 4 MB prompt is about a million tokens; tokenizing all of it to answer "the limit is 32,768" costs
seconds. `encode_within` counts the tokens of a long text chunk by chunk and stops as soon as the
count is past the limit; a text that may fit is then encoded whole, in one call, so its ids are
exactly `Tokenizer.encode`'s (chunks are only ever counted, never joined into a prompt).

Every call goes through `Tokenizer.encode_batch`, which for the Rust backends (Hugging Face
`tokenizers`, GGUF, tiktoken, SentencePiece) releases the GIL while it works: a thread tokenizing
a huge prompt does not stall the event loop of the process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from detok.tokenizer.base import Tokenizer

# Texts are counted in chunks of this many characters (≈4-16K tokens), one chunk per call: the
# work done past the limit is at most one chunk's, and a call with one text keeps the tokenizer on
# the calling thread (several texts spread over every core by rayon, taking CPU from the streams).
CHUNK_CHARS = 16_384
CHUNKS_PER_CALL = 1
# A cut can add tokens the whole text would not have (a word or a special token split in two, a
# SentencePiece prefix space): each cut is allowed this many before the count proves anything.
SLACK_PER_CUT = 16
# Where to cut: at the last whitespace in this many characters before the chunk's end, if any.
_CUT_SEARCH = 256


@dataclasses.dataclass(frozen=True)
class TooLong:
    """The text holds at least `at_least` tokens, more than the limit asked about."""

    at_least: int


def encode_within(tok: Tokenizer, text: str, limit: int, add_special_tokens: bool = False) -> list[int] | TooLong:
    """`tok.encode(text, add_special_tokens)` if the text may hold at most `limit` tokens, else
    `TooLong` once counting chunks has shown it holds more (then far less than the whole text was
    tokenized). A text near the limit is always encoded whole: its caller sees the exact count."""
    if len(text) <= 2 * max(limit, CHUNK_CHARS):  # a token is rarely shorter than half a character
        return _encode_whole(tok, text, add_special_tokens)
    count = cuts = 0
    for batch in _chunk_batches(text):
        count += sum(len(ids) for ids in tok.encode_batch(batch))
        cuts += len(batch)
        proven = count - SLACK_PER_CUT * cuts
        if proven > limit:
            return TooLong(proven)
    return _encode_whole(tok, text, add_special_tokens)


def _encode_whole(tok: Tokenizer, text: str, add_special_tokens: bool) -> list[int]:
    return tok.encode_prompt(text, add_special_tokens=add_special_tokens)


def _chunk_batches(text: str) -> Iterator[list[str]]:
    """The text in chunks of about CHUNK_CHARS, cut after whitespace where there is some nearby,
    grouped CHUNKS_PER_CALL at a time (a generator: nothing is sliced past where counting stops)."""
    batch: list[str] = []
    start, n = 0, len(text)
    while start < n:
        end = min(start + CHUNK_CHARS, n)
        if end < n:
            window = text[end - _CUT_SEARCH : end]
            cut = max(window.rfind(" "), window.rfind("\n"))
            if cut > 0:
                end = end - _CUT_SEARCH + cut
        batch.append(text[start:end])
        start = end
        if len(batch) == CHUNKS_PER_CALL:
            yield batch
            batch = []
    if batch:
        yield batch
