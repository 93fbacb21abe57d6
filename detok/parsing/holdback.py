"""Finding marker strings in streamed text: the earliest whole marker, and how much of a text's tail
could still grow into one (the only text a parser may hold back).

Used by parsers whose markers are plain text of this tokenizer (split over several tokens): a marker
that is one token arrives as a marker `Piece` instead and never needs these.
"""

from __future__ import annotations

from collections.abc import Sequence

from detok.parsing.types import Piece


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
        while buf:
            pos, m = earliest(buf, self._markers)
            if m is None:
                keep = partial_suffix_len(buf, self._markers)
                if len(buf) > keep:
                    out.append(Piece(buf[: len(buf) - keep]))
                self._held = buf[len(buf) - keep :]
                return out
            if pos:
                out.append(Piece(buf[:pos]))
            out.append(Piece(m, m))
            buf = buf[pos + len(m) :]
        self._held = ""
        return out

    def finish(self) -> list[Piece]:
        held, self._held = self._held, ""
        return [Piece(held)] if held else []
