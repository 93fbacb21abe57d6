"""A held steady state (`Steady.held`: a call decoded once at its end, `keyed_call` and `pythonic`)
keeps its promise to the worker, which keeps the raw bytes of such a state's plain ids and feeds
their text in one piece when the slot leaves its compiled path: feeding the qualifying pieces one
by one or joined gives the same content and calls. Random texts of the families' markers and
snippets, markers as tokens or as text, in random groupings; a stated share of the pieces held."""

from __future__ import annotations

import random

from detok.parsing.tools import FAMILIES as TOOL_FAMILIES
from detok.parsing.types import Piece, Steady
from tests.helpers.tool_pieces import text_pieces
from tests.parsing.test_tools_properties import JSON_BITS, SNIPPETS, TOOLS, grouped

HELD_FAMILIES = [f for f in TOOL_FAMILIES if f.names[0] in ("gemma4", "pythonic", "llama4_pythonic")]
WORDS = ["plain words ", "北京 ", "🫨", "x", "\n", "<", "[", "]", "(", ")", "{", "}", ":", ",", "'", '"', "=", "1"]


def _qualifies(piece: Piece, steady: Steady) -> bool:
    return piece.marker is None and bool(piece.text) and not any(c in piece.text for c in steady.triggers)


def _outputs(family: type, pieces: list[Piece], markers: frozenset[str], join: bool) -> tuple[tuple[str, str], int]:
    """(content, every call's id, name and arguments joined), and how many pieces were held; with
    `join`, each run of qualifying pieces in a held state is fed as one piece."""
    parser = family(tools=TOOLS, token_markers=markers, call_id=lambda i: f"call_{i}")
    content: list[str] = []
    calls: list[str] = []
    held = 0

    def feed(piece: Piece) -> None:
        text, deltas = parser.feed(piece)
        content.append(text)
        calls.extend(f"{d.index}|{d.id}|{d.name}|{d.arguments};" for d in deltas)

    run: list[str] = []
    for piece in pieces:
        steady = parser.steady()
        if steady is not None and steady.held and _qualifies(piece, steady):
            held += 1
            if join:
                run.append(piece.text)
                continue
        elif run:
            feed(Piece("".join(run)))
            run = []
        feed(piece)
    if run:
        feed(Piece("".join(run)))
    text, deltas = parser.finish()
    content.append(text)
    calls.extend(f"{d.index}|{d.id}|{d.name}|{d.arguments};" for d in deltas)
    return ("".join(content), _joined(calls)), held


def _joined(calls: list[str]) -> str:
    """Each call's id, name and argument fragments joined (the timing of fragments may differ)."""
    by_index: dict[str, list[str]] = {}
    for c in calls:
        index, rest = c.split("|", 1)
        by_index.setdefault(index, []).append(rest)
    return repr(sorted(by_index.items()))


def test_held_pieces_joined_or_not_give_the_same_calls() -> None:
    rng = random.Random(0)
    held = total = 0
    for _ in range(300):
        family = rng.choice(HELD_FAMILIES)
        bits = list(family.markers) + JSON_BITS + WORDS * 3 + SNIPPETS[family.names[0]] * 4
        as_tokens = rng.random() < 0.5
        markers = frozenset(family.markers) if as_tokens else frozenset()
        text = "".join(rng.choices(bits, k=30))
        if rng.random() < 0.5:  # a call list at the output's start (pythonic's only kind)
            text = rng.choice(SNIPPETS[family.names[0]]) + text
        pieces = grouped(text_pieces(text, sorted(markers)), [rng.randint(1, 4) for _ in range(60)])
        separate, n = _outputs(family, pieces, markers, join=False)
        joined, _ = _outputs(family, pieces, markers, join=True)
        assert joined == separate, (family, text)
        held += n
        total += len(pieces)
    assert held / total >= 0.15, held / total  # (measured: 26%)
