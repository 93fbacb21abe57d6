"""llama3_json beyond the peers' cases (tests/parsing/cases/llama3_json.json): `<|python_tag|>` in and
out of calls on Llama 3.1's vocabulary (`vocabularies.llama31`), with its text kept and skipped, and on
Llama 3's (`vocabularies.llama3`, whose file predates the tag: plain text), every grouping."""

from __future__ import annotations

import functools
import itertools

import pytest

from detok.parsing.tools import Llama3JsonToolParser
from detok.parsing.types import OutputParsing, Piece, ToolSpec
from detok.wire.params import DecodeParams
from detok.wire.to_workers import EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.typed_helpers import assemble, run_request
from tests.helpers.tool_parsing import run_all_groupings, run_parser
from tests.helpers.tool_pieces import marker_ids, token_pieces
from tests.parsing import vocabularies as voc


@pytest.fixture(scope="module")
def llama3_tok():  # type: ignore[no-untyped-def]
    return voc.llama3()


# `<|python_tag|>` (Llama 3.1) not followed by a call is content as the decoder gave it: its own text
# with skip_special_tokens=False, none when skipped. vLLM, with no call parsed, gives the output as
# decoded in both paths (extract_tool_calls' `content=model_output`, the streamed `content=delta_text`
# for output not starting with `{` or the tag); its llama3_json keeps the request's skip_special_tokens
# (default true), so by default the tag is skipped. Before a call (separators aside) it is dropped with
# those separators. (text, content with the tag's text, content with it skipped, calls)
CALL_F = '{"name": "f", "parameters": {"a": 1}}'
TAG_CASES = [
    ("Hi there. <|python_tag|>print(1)", "Hi there. <|python_tag|>print(1)", "Hi there. print(1)", []),
    # vLLM's non-streamed path gives it as written; its streamed path, for output starting with the tag,
    # waits for JSON and loses the text
    ("<|python_tag|>print(1)", "<|python_tag|>print(1)", "print(1)", []),
    ("Hi <|python_tag|>" + CALL_F, "Hi ", "Hi ", [("f", {"a": 1})]),
    ("<|python_tag|> \n" + CALL_F + " ok", " ok", " ok", [("f", {"a": 1})]),
    ('Hi <|python_tag|> {"a": 1} x', 'Hi <|python_tag|> {"a": 1} x', 'Hi  {"a": 1} x', []),
    ('<|python_tag|>{"name": "f" oops', '<|python_tag|>{"name": "f" oops', '{"name": "f" oops', []),
    ("x <|python_tag|>  ", "x <|python_tag|>  ", "x   ", []),
    ("a <|python_tag|>b <|python_tag|>" + CALL_F, "a <|python_tag|>b ", "a b ", [("f", {"a": 1})]),
    (CALL_F + "; <|python_tag|>" + CALL_F + " <|python_tag|>end", " <|python_tag|>end", " end",
     [("f", {"a": 1}), ("f", {"a": 1})]),
]


def _tag_pieces(tok, text: str, skip: bool) -> list[Piece]:  # type: ignore[no-untyped-def]
    pieces = token_pieces(tok, text, marker_ids(Llama3JsonToolParser, tok))
    assert any(p.marker for p in pieces) == ("<|python_tag|>" in text)  # the tag is one token, by id
    # the worker's marker piece carries the decoder's text for it: none where it was skipped
    return [Piece("", p.marker) if skip and p.marker else p for p in pieces]


def _one_char_at_a_time(pieces: list[Piece]) -> list[Piece]:
    return [q for p in pieces for q in ([p] if p.marker else [Piece(c) for c in p.text])]


@pytest.mark.parametrize("case", range(len(TAG_CASES)))
@pytest.mark.parametrize("skip", [False, True], ids=["keep_special", "skip_special"])
def test_python_tag_is_content_as_decoded_unless_a_call_follows(case: int, skip: bool) -> None:
    text, kept, skipped, calls = TAG_CASES[case]
    pieces = _tag_pieces(voc.llama31(), text, skip)
    markers = frozenset({"<|python_tag|>"})
    result = run_all_groupings(Llama3JsonToolParser, pieces, token_markers=markers)
    assert result.content == (skipped if skip else kept)
    assert [(c.name, c.args()) for c in result.calls] == calls
    by_char = run_parser(Llama3JsonToolParser, _one_char_at_a_time(pieces), token_markers=markers)
    assert by_char.summary() == result.summary()


@pytest.mark.parametrize("case", range(len(TAG_CASES)))
def test_python_tag_as_plain_text(case: int, llama3_tok) -> None:  # type: ignore[no-untyped-def]
    """Llama 3.0's vocabulary has no such token: the tag is the model's text over several tokens, found
    in the text, and behaves as the kept token."""
    text, kept, _, calls = TAG_CASES[case]
    pieces = token_pieces(llama3_tok, text, {})
    result = run_all_groupings(Llama3JsonToolParser, pieces)
    assert result.content == kept
    assert [(c.name, c.args()) for c in result.calls] == calls
    by_char = run_parser(Llama3JsonToolParser, [Piece(c) for c in text])
    assert by_char.summary() == result.summary()


@pytest.mark.parametrize("skip", [False, True], ids=["keep_special", "skip_special"])
def test_python_tag_inside_a_string_argument_is_its_text(skip: bool) -> None:
    """Inside a call the tag is the argument's text as decoded (vLLM parses the decoded text)."""
    text = '{"name": "f", "parameters": {"c": "x<|python_tag|>y"}}'
    result = run_all_groupings(Llama3JsonToolParser, _tag_pieces(voc.llama31(), text, skip),
                               token_markers=frozenset({"<|python_tag|>"}))
    assert result.content == ""
    assert [(c.name, c.args()) for c in result.calls] == [("f", {"c": "xy" if skip else "x<|python_tag|>y"})]


_RIDS = itertools.count(1)


@functools.cache
def _core() -> WorkerCore:
    """One worker on Llama 3.1's vocabulary (costly to build), each request a new rid that ends."""
    return WorkerCore(voc.llama31())


@pytest.mark.parametrize("skip", [False, True], ids=["keep_special", "skip_special"])
@pytest.mark.parametrize("grouping", ["one_per_step", "all_at_once"])
def test_python_tag_through_the_worker(skip: bool, grouping: str) -> None:
    """The worker decodes the tag under the request's skip_special_tokens and still cuts it by id: a
    tag before a call goes, one before text is that text's as decoded."""
    tok = voc.llama31()
    text = "Let me run it. <|python_tag|>print(1)\n<|python_tag|>" + CALL_F
    ids = tok.encode(text)
    parsing = OutputParsing(None, "llama3_json", (ToolSpec("f", {"type": "object"}),))
    groups = [1] * len(ids) if grouping == "one_per_step" else [len(ids)]
    rid = next(_RIDS)
    batches = run_request(_core(), rid, ids, groups, parsing, DecodeParams(skip_special_tokens=skip), EndRequest(rid, "length"))
    got = assemble(batches, rid)
    assert got.content == ("Let me run it. print(1)\n" if skip else "Let me run it. <|python_tag|>print(1)\n")
    assert [c[1:] for c in got.calls.values()] == [["f", '{"a": 1}']]
