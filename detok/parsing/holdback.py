"""Finding marker strings in streamed text: the earliest whole marker, and how much of a text's tail
could still grow into one (the only text a parser may hold back).

Used by parsers whose markers are plain text of this tokenizer (split over several tokens): a marker
that is one token arrives as a marker `Piece` instead and never needs these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from detok.parsing.types import Piece


def find_all(text: str, markers: Sequence[str], start: int = 0) -> Iterator[tuple[int, str]]:
    """Every marker occurrence in `text` from `start`, in order, not overlapping (at one position the
    longest marker wins). Each marker's next occurrence is searched for once after the previous
    match ends, so a text holding very many markers costs linear time, not a rescan per marker."""
    nxt = {m: text.find(m, start) for m in markers}
    while True:
        best, found = -1, ""
        for m, p in nxt.items():
            if p != -1 and (best == -1 or p < best or (p == best and len(m) > len(found))):
                best, found = p, m
        if best == -1:
            return
        yield best, found
        end = best + len(found)
        for m, p in nxt.items():
            if p != -1 and p < end:
                nxt[m] = text.find(m, end)


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


class MarkerSplitter:
    """Cuts text-matched markers out of streamed text: every marker becomes a marker `Piece` of its
    own, the text around it plain pieces. Marker pieces fed in (single-token markers, cut by id) pass
    through; only a tail that could still become a text marker is held back."""

    def __init__(self, text_markers: Sequence[str]) -> None:
        self._markers = tuple(text_markers)
        self._firsts = "".join(sorted({m[0] for m in self._markers}))
        self._held = ""

    @property
    def passthrough(self) -> bool:
        """Text fed now comes out unchanged (no text markers, nothing held)."""
        return not self._markers and not self._held

    @property
    def holding(self) -> bool:
        """A tail of the text fed is held back (it could still become a marker)."""
        return bool(self._held)

    def feed(self, piece: Piece) -> list[Piece]:
        if piece.marker is not None:
            out = [Piece(self._held)] if self._held else []
            self._held = ""
            out.append(piece)
            return out
        if not self._markers:
            return [piece] if piece.text else []
        if not self._held and not any(c in piece.text for c in self._firsts):
            return [piece] if piece.text else []  # no marker can start in this text
        buf = self._held + piece.text
        out: list[Piece] = []
        i = 0
        for pos, m in find_all(buf, self._markers):
            if pos > i:
                out.append(Piece(buf[i:pos]))
            out.append(Piece(m, m))
            i = pos + len(m)
        rest = buf[i:]
        keep = partial_suffix_len(rest, self._markers)
        if len(rest) > keep:
            out.append(Piece(rest[: len(rest) - keep]))
        self._held = rest[len(rest) - keep :]
        return out

    def finish(self) -> list[Piece]:
        held, self._held = self._held, ""
        return [Piece(held)] if held else []
