"""Finding marker strings in streamed text: the earliest whole marker, and how much of a text's tail
could still grow into one (the only text a parser may hold back).

Used by parsers whose markers are plain text of this tokenizer (split over several tokens): a marker
that is one token arrives as a marker `Piece` instead and never needs these.
"""

from __future__ import annotations

from collections.abc import Sequence


def earliest(text: str, markers: Sequence[str], start: int = 0) -> tuple[int, str | None]:
    """(position, marker) of the first marker in `text` at or after `start`; (-1, None) if none.
    At one position the longest marker wins (so "<|end|>" never shadows a longer marker)."""
    best, found = -1, None
    for m in markers:
        i = text.find(m, start)
        if i != -1 and (best == -1 or i < best or (i == best and len(m) > len(found or ""))):
            best, found = i, m
    return best, found


def partial_suffix_len(text: str, markers: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of one of `markers`: text that
    may still become a marker once more arrives, so it must be held back, and nothing more."""
    longest = 0
    n = len(text)
    for m in markers:
        # a tail that is a proper prefix starts with m[0] within the last len(m)-1 characters;
        # scanning from the left tries the longest candidate first
        i = text.find(m[0], max(0, n - len(m) + 1))
        while i != -1 and n - i > longest:
            if m.startswith(text[i:]):
                longest = n - i
                break
            i = text.find(m[0], i + 1)
    return longest
