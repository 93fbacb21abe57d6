"""Running a tool parser over pieces and checking the streaming contract on the way."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from detok.parsing.output import call_id_maker
from detok.parsing.types import Piece, ToolCallDelta, ToolSpec


@dataclass
class Call:
    id: str
    name: str
    arguments: str = ""

    def args(self) -> object:
        return json.loads(self.arguments)


@dataclass
class Result:
    content: str = ""
    calls: list[Call] = field(default_factory=list)
    deltas: list[list[ToolCallDelta]] = field(default_factory=list)

    def summary(self) -> tuple[str, list[tuple[str, str, str]]]:
        return self.content, [(c.id, c.name, c.arguments) for c in self.calls]


def tools_of(*specs: tuple[str, dict | None] | str) -> tuple[ToolSpec, ...]:
    """ToolSpecs from names or (name, parameters) pairs."""
    out = []
    for s in specs:
        out.append(ToolSpec(s) if isinstance(s, str) else ToolSpec(s[0], s[1]))
    return tuple(out)


def run_parser(
    family: type,
    pieces: Sequence[Piece],
    *,
    tools: Sequence[ToolSpec] = (),
    token_markers: frozenset[str] = frozenset(),
    seed: str = "req",
) -> Result:
    """Feed every piece, then finish; check that each index starts with one delta carrying id and
    name, that later deltas carry only arguments, and that indices only grow."""
    parser = family(tools=tuple(tools), token_markers=token_markers, call_id=call_id_maker(seed))
    result = Result()
    content: list[str] = []
    for p in pieces:
        text, deltas = parser.feed(p)
        content.append(text)
        result.deltas.append(deltas)
        _check(result, deltas)
    text, deltas = parser.finish()
    content.append(text)
    result.deltas.append(deltas)
    _check(result, deltas)
    result.content = "".join(content)
    assert parser.calls_emitted == len(result.calls)
    return result


def _check(result: Result, deltas: list[ToolCallDelta]) -> None:
    for d in deltas:
        if d.index == len(result.calls):
            assert d.id and d.name, f"first delta of call {d.index} lacks id or name: {d}"
            assert d.arguments == "", d
            result.calls.append(Call(d.id, d.name))
        else:
            assert d.index == len(result.calls) - 1, f"delta for index {d.index} after {len(result.calls)} calls"
            assert d.id is None and d.name is None, f"a later delta repeats id/name: {d}"
            result.calls[d.index].arguments += d.arguments


def assert_valid_arguments(result: Result) -> None:
    for c in result.calls:
        try:
            json.loads(c.arguments)
        except ValueError as e:
            raise AssertionError(f"call {c.name} arguments are not JSON: {c.arguments!r}") from e


def run_all_groupings(family: type, pieces: Sequence[Piece], few: bool = False, **kwargs: object) -> Result:
    """The result of one piece per token, checked equal to all-at-once, steps of 2, 3, 5, 8 and
    random steps (`few`: all at once and one random regrouping only, where a hypothesis property
    already draws any grouping of such texts); arguments valid JSON. Returns the per-token run."""
    import random

    from tests.helpers import parsing_pieces
    from tests.helpers.tool_pieces import all_at_once, random_groups, regroup

    base = run_parser(family, pieces, **kwargs)  # type: ignore[arg-type]
    assert_valid_arguments(base)
    groupings = [all_at_once(pieces)]
    if not few:
        groupings += [regroup(pieces, lambda n=n: n) for n in (2, 3, 5, 8)]
        groupings += [random_groups(pieces, seed) for seed in range(3)]
    # the reasoning helper's regrouping also cuts inside a token's text
    groupings += [parsing_pieces.regroup(pieces, random.Random(seed)) for seed in range(1 if few else 3)]
    for grouped in groupings:
        other = run_parser(family, grouped, **kwargs)  # type: ignore[arg-type]
        assert other.summary() == base.summary(), (grouped, other.summary(), base.summary())
    return base
