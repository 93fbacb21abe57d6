"""qwen3_coder: a call written without `<tool_call>` (`<function=NAME>...</function>` in content, the
fallback of vLLM's qwen3coder parser, `_get_function_calls`: "Back-off strategy if no tool_call tags
found") ends at its `</function>`, and what follows is content again, a further `<function=` a further
call (as SGLang's streamed Qwen3CoderDetector: outside a `<tool_call>` region its text is normal text
and every `<function=NAME>` opens a call). The text after the `</function>` is content at once, not held
for a `</tool_call>` that may never come. vLLM's non-streamed path keeps only the text before the first
call (the stated behaviour for every family in docs/reasoning-and-tools.md), its streamed path has no
fallback. A `</tool_call>` right after the bare call (whitespace aside) still closes it as in a region.
On Qwen3.6's vocabulary (`<tool_call>` a token, the tags text) and Qwen(1)'s, every grouping and one
character per step."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from detok.parsing.tools import Qwen3CoderToolParser
from detok.parsing.types import Piece
from tests.helpers.tool_parsing import Result, run_all_groupings, run_parser, tools_of
from tests.helpers.tool_pieces import marker_ids, token_pieces

TOOLS = tools_of(("f", {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}), "g")
F = "<function=f>\n<parameter=a>\nx y\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>"
F_ARGS = {"a": "x y", "n": 3}
G = "<function=g>\n</function>"

CASES = [
    # the text after the call is content (its leading whitespace too, as after `</tool_call>`)
    ("Hi " + F + "\nDone.", "Hi \nDone.", [("f", F_ARGS)]),
    (F + " see </function> and <parameter=a>", " see </function> and <parameter=a>", [("f", F_ARGS)]),
    # a further bare call, text between and after
    (F + "\nand\n" + G + "\n end", "\nand\n\n end", [("f", F_ARGS), ("g", {})]),
    # whitespace between and after calls is dropped
    (F + "\n\n" + G + "\n\n", "", [("f", F_ARGS), ("g", {})]),
    # then a call in a region
    (F + "\ntext <tool_call>\n" + G + "\n</tool_call>", "\ntext ", [("f", F_ARGS), ("g", {})]),
    # a `</tool_call>` right after it closes it, as in a region (whitespace before it dropped)
    (F + "\n</tool_call>\nok", "\nok", [("f", F_ARGS)]),
    (F + " </tool_call>", "", [("f", F_ARGS)]),
    # a name that is no name: its text is dropped up to its `</function>`, then content
    ("<function={{ tc.name }}>\n<parameter=a>\nx\n</parameter>\n</function> after", " after", []),
    ("<function=f<parameter=a>\nx\n</parameter>\n</function> after", " after", []),
]


def by_char(pieces: Sequence[Piece]) -> list[Piece]:
    """One character per step (markers stay whole: the worker feeds a marker token as one piece)."""
    return [q for p in pieces for q in ([p] if p.marker is not None else [Piece(c) for c in p.text])]


def run(tok, text: str) -> Result:  # type: ignore[no-untyped-def]
    markers = marker_ids(Qwen3CoderToolParser, tok)
    pieces = token_pieces(tok, text, markers)
    tags = frozenset(markers.values())
    result = run_all_groupings(Qwen3CoderToolParser, pieces, tools=TOOLS, token_markers=tags)
    one_char = run_parser(Qwen3CoderToolParser, by_char(pieces), tools=TOOLS, token_markers=tags)
    assert one_char.summary() == result.summary()
    return result


@pytest.mark.parametrize("tokenizer", ["qwen3_tok", "plain_tok"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_text_after_a_bare_call_is_content(case: int, tokenizer: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tokenizer)
    text, content, calls = CASES[case]
    result = run(tok, text)
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls


@pytest.mark.parametrize("after", ["\nDone.", "\n\n", "\nsee <tool_call>\n" + G + "\n</tool_call>\nok"])
def test_a_bare_call_ends_as_one_in_a_region(after: str, qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    # `<tool_call>\nCALL\n</tool_call>` and a bare `CALL` give the same content and calls
    bare, region = run(qwen3_tok, F + after), run(qwen3_tok, "<tool_call>\n" + F + "\n</tool_call>" + after)
    assert (bare.content, [(c.name, c.arguments) for c in bare.calls]) == (
        region.content, [(c.name, c.arguments) for c in region.calls])
