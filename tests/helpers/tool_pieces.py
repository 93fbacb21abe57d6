"""Pieces as the worker makes them, for parser tests: a text encoded by a real tokenizer, cut at the
marker token ids (each marker token its own piece), the other tokens' text one piece per token (a
token ending inside a UTF-8 character joins the next). `regroup` merges neighbouring plain pieces the
way a step of several ids would (never across a marker), so a test can replay any grouping.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Sequence

from detok.parsing.registry import marker_token_ids
from detok.parsing.types import Piece
from tests.helpers import parsing_pieces


def marker_ids(family: type, tok) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """The family's markers that are one token of `tok` (id -> marker), as the worker finds them."""
    return {i: m for m, i in marker_token_ids(family, single_token_id(tok)).items()}


def single_token_id(tok) -> Callable[[str], int | None]:  # type: ignore[no-untyped-def]
    """token_id(text): the id when `text` is exactly one token of `tok` (the reasoning helper's)."""
    return parsing_pieces.single_token(tok)


def token_pieces(tok, text: str, markers: dict[int, str]) -> list[Piece]:  # type: ignore[no-untyped-def]
    """One piece per token of `text` (markers by id; the reasoning helper's `token_pieces` on the
    text's ids); their texts join to `text` (asserted)."""
    pieces = parsing_pieces.token_pieces(tok, tok.encode(text), markers)
    joined = "".join(p.text for p in pieces)
    assert joined == text, (joined, text)
    return [p for p in pieces if p.text]


def regroup(pieces: Sequence[Piece], sizes: Callable[[], int]) -> list[Piece]:
    """Merge runs of plain pieces into groups of `sizes()` pieces; markers stay alone."""
    out: list[Piece] = []
    run: list[str] = []
    want = sizes()
    for p in pieces:
        if p.marker is not None:
            if run:
                out.append(Piece("".join(run)))
                run = []
            out.append(p)
            want = sizes()
            continue
        run.append(p.text)
        if len(run) >= want:
            out.append(Piece("".join(run)))
            run = []
            want = sizes()
    if run:
        out.append(Piece("".join(run)))
    return out


def random_groups(pieces: Sequence[Piece], seed: int, most: int = 8) -> list[Piece]:
    rng = random.Random(seed)
    return regroup(pieces, lambda: rng.randint(1, most))


def all_at_once(pieces: Sequence[Piece]) -> list[Piece]:
    return regroup(pieces, lambda: 1 << 30)


def text_pieces(text: str, markers: Sequence[str]) -> list[Piece]:
    """Pieces of `text` with the given marker strings cut out as marker pieces (no tokenizer: for
    markers added to a vocabulary), the text between them one piece per character."""
    out: list[Piece] = []
    for p in marker_runs(text, markers):
        if p.marker is None:
            out += map(Piece, p.text)
        else:
            out.append(p)
    return out


def marker_runs(text: str, markers: Sequence[str]) -> list[Piece]:
    """`text` with the given marker strings cut out as marker pieces (the longest that starts at
    each point, left to right), each run of text between them one piece."""
    out: list[Piece] = []
    i = 0
    for hit in _marker_pattern(tuple(markers)).finditer(text):
        if hit.start() > i:
            out.append(Piece(text[i : hit.start()]))
        out.append(Piece(hit.group(), hit.group()))
        i = hit.end()
    if i < len(text):
        out.append(Piece(text[i:]))
    return out


@functools.cache
def _marker_pattern(markers: tuple[str, ...]) -> re.Pattern[str]:
    ordered = sorted(markers, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered)) if ordered else "(?!)")


def added_marker_pieces(tok, text: str, markers: Sequence[str]) -> list[Piece]:  # type: ignore[no-untyped-def]
    """For a marker set the tokenizer lacks: the markers as if added to its vocabulary (one marker
    piece each), the text between them the tokenizer's real tokens (one piece per token)."""
    out: list[Piece] = []
    ordered = sorted(markers, key=len, reverse=True)
    i = start = 0
    while i <= len(text):
        hit = next((m for m in ordered if text.startswith(m, i)), None) if i < len(text) else ""
        if hit is None:
            i += 1
            continue
        if i > start:
            out.extend(token_pieces(tok, text[start:i], {}))
        if hit:
            out.append(Piece(hit, hit))
            i += len(hit)
            start = i
        else:
            break
    return out
