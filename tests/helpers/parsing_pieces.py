"""Feed a parser what a worker feeds it: the decoded text of a request's ids, cut at marker ids.

A marker that is one token of the tokenizer becomes a marker `Piece` (detected by id, never split);
every other id's text is plain text. Runs are decoded keeping added tokens (`skip_special=False` by
default): the models' own tokenizer.json marks `<tool_call>`, `<think>` and the like not special (so the
worker's text keeps them), while detok's tiktoken presets mark every added token special.
`token_pieces` gives one piece per id (a scheduler sending one id per step), `run_pieces` one text
piece per run between markers (all ids at once); `regroup` cuts and joins text pieces anew.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

from detok.parsing.types import Piece
from detok.tokenizer.base import Tokenizer


def marker_ids(tok: Tokenizer, markers: Iterable[str]) -> dict[int, str]:
    """{id: marker} for the markers that are exactly one token of `tok` (the worker's check)."""
    found: dict[int, str] = {}
    for m in markers:
        tid = tok.token_to_id(m)
        if tid is not None and tok.encode(m) == [tid]:
            found[tid] = m
    return found


def single_token(tok: Tokenizer) -> Callable[[str], int | None]:
    """`token_id(text)` as OutputParser wants it: the id of a text that is exactly one token."""

    def token_id(text: str) -> int | None:
        tid = tok.token_to_id(text)
        return tid if tid is not None and tok.encode(text) == [tid] else None

    return token_id


def _runs(ids: Sequence[int], markers: dict[int, str]) -> list[list[int] | str]:
    out: list[list[int] | str] = []
    run: list[int] = []
    for i in ids:
        if i in markers:
            if run:
                out.append(run)
                run = []
            out.append(markers[i])
        else:
            run.append(i)
    if run:
        out.append(run)
    return out


def run_pieces(
    tok: Tokenizer, ids: Sequence[int], markers: dict[int, str], skip_special: bool = False
) -> list[Piece]:
    """All ids at once: one text piece per run of ordinary ids, one marker piece per marker id."""
    out: list[Piece] = []
    for r in _runs(ids, markers):
        if isinstance(r, str):
            out.append(Piece(r, r))
        else:
            text = tok.decode(r, skip_special_tokens=skip_special)
            if text:
                out.append(Piece(text))
    return out


def token_pieces(
    tok: Tokenizer, ids: Sequence[int], markers: dict[int, str], skip_special: bool = False
) -> list[Piece]:
    """One id per step: each ordinary id's new text (a character split over ids waits for its last
    byte, as the worker's stream holds U+FFFD), each marker id its marker piece."""
    out: list[Piece] = []
    for r in _runs(ids, markers):
        if isinstance(r, str):
            out.append(Piece(r, r))
            continue
        done = ""
        for k in range(1, len(r) + 1):
            text = tok.decode(r[:k], skip_special_tokens=skip_special)
            if k < len(r) and text.endswith("\ufffd"):
                continue
            if len(text) > len(done) and text.startswith(done):
                out.append(Piece(text[len(done) :]))
                done = text
        # a decoder that rewrites earlier text (rare): the run's final text wins
        if done != tok.decode(r, skip_special_tokens=skip_special):
            raise AssertionError(f"incremental decode of {r} is not prefix-stable")
    return out


def regroup(pieces: Sequence[Piece], rng: random.Random, cut_share: float = 0.3) -> list[Piece]:
    """The same text cut differently: text pieces split at random points and adjacent text pieces
    joined at random; marker pieces stay whole and in place."""
    text = [p for p in pieces]
    split: list[Piece] = []
    for p in text:
        if p.marker is not None or len(p.text) < 2:
            split.append(p)
            continue
        points = sorted({rng.randrange(1, len(p.text)) for _ in range(len(p.text)) if rng.random() < cut_share})
        last = 0
        for at in [*points, len(p.text)]:
            split.append(Piece(p.text[last:at]))
            last = at
    joined: list[Piece] = []
    for p in split:
        if p.marker is None and joined and joined[-1].marker is None and rng.random() < 0.5:
            joined[-1] = Piece(joined[-1].text + p.text)
        else:
            joined.append(p)
    return joined


def feed_all(parser: object, pieces: Iterable[Piece]) -> tuple[str, list[Piece]]:
    """Feed a ReasoningParser every piece, then finish: (joined reasoning, content pieces)."""
    reasoning: list[str] = []
    content: list[Piece] = []
    for p in pieces:
        r, c = parser.feed(p)  # type: ignore[attr-defined]
        reasoning.append(r)
        content.extend(c)
    r, c = parser.finish()  # type: ignore[attr-defined]
    reasoning.append(r)
    content.extend(c)
    return "".join(reasoning), content
