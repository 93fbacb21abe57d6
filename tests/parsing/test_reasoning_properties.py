"""Property: however a request's text is cut into pieces (text split at any point, marker pieces whole),
the joined reasoning and content are the same as when it is fed at once; and no start/end marker text
reaches the reasoning (unless the text itself spells one out of partial markers around a dropped one). Texts are drawn from each family's markers, their prefixes and ordinary
text, encoded by the real vocabularies the peer cases run on."""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.reasoning import FAMILIES
from detok.parsing.reasoning.think import ThinkParser
from detok.parsing.registry import reasoning_parser_class
from detok.parsing.types import Piece
from tests.helpers.parsing_pieces import feed_all, marker_ids, regroup, run_pieces, token_pieces
from tests.parsing import peer_cases

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "60"))

ORDINARY = ["Hello", " world", "\n", "  ", "x", "北京", "🫨", "<", ">", "/", "[", "]", "|", "=", "{", "}"]
EXTRA = ["<function=bash>", "<function name", "\n<function=", "<parameter=x>", "<|tool_call_begin|>", "<tool_call>\n<function=f>"]


def fragments(family: str) -> list[str]:
    cls = reasoning_parser_class(family)
    out = list(ORDINARY) + EXTRA
    for m in cls.markers:
        out += [m, m, m[: len(m) // 2], m[len(m) // 2 :], m[:-1]]
    return out


# the marker families (Harmony's in test_harmony.py) on the vocabularies their peer cases run on
THINK = sorted(f.names[0] for f in FAMILIES if issubclass(f, ThinkParser))
CASES = sorted({(c.reasoning_parser, v) for c in peer_cases.load() if c.reasoning_parser in THINK for v in c.vocabularies})


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_grouping_same_result(data: st.DataObject) -> None:
    family, vocab = data.draw(st.sampled_from(CASES), label="family, vocabulary")
    tok = peer_cases.vocabulary(vocab)
    text = "".join(data.draw(st.lists(st.sampled_from(fragments(family)), max_size=40), label="fragments"))
    starts = data.draw(st.sampled_from([None, True, False]), label="starts_in_reasoning")
    cls = reasoning_parser_class(family)
    markers = marker_ids(tok, cls.markers)
    ids = tok.encode(text)

    def parse(pieces: list[Piece]) -> tuple[str, str]:
        parser = cls(starts_in_reasoning=starts, token_markers=frozenset(markers.values()))
        reasoning, content = feed_all(parser, pieces)
        # a start or end marker token never reaches the content (the implicit end's does: the tool
        # parser needs it)
        assert not any(p.marker in (cls.start, cls.end) for p in content)  # type: ignore[attr-defined]
        return reasoning, "".join(p.text for p in content)

    whole = parse(run_pieces(tok, ids, markers))
    assert parse(token_pieces(tok, ids, markers)) == whole
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    assert parse(regroup(token_pieces(tok, ids, markers), rng)) == whole
    # every character is accounted for: reasoning + content are the text less the dropped markers
    joined = "".join(p.text for p in run_pieces(tok, ids, markers))
    assert len(whole[0]) + len(whole[1]) <= len(joined)
    if not any(m[:-1] in text.replace(m, "") for m in cls.markers):  # no partial marker to join with
        for m in (cls.start, cls.end):  # type: ignore[attr-defined]
            assert m not in whole[0]


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.text(alphabet="<>/think_cal[]|= \nabc", max_size=80), seed=st.integers(0, 2**32))
def test_char_soup_groupings(text: str, seed: int) -> None:
    """Text made only of marker characters, split anywhere: the text-marker scanner's holdback."""
    for family in THINK:
        cls = reasoning_parser_class(family)
        for starts in (True, False):
            pieces = [Piece(text)] if text else []
            a = feed_all(cls(starts_in_reasoning=starts, token_markers=frozenset()), pieces)
            b = feed_all(cls(starts_in_reasoning=starts, token_markers=frozenset()), regroup(pieces, random.Random(seed), 0.6))
            assert (a[0], "".join(p.text for p in a[1])) == (b[0], "".join(p.text for p in b[1]))
