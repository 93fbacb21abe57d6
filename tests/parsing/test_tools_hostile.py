"""Hostile input for the tool-call families: huge arguments (linear, streamed as they arrive), broken
JSON, calls cut off at every point, twice MAX_TOOL_CALLS calls (MAX_TOOL_CALLS emitted, the rest
dropped), names not in the request's tools, and the registry's errors."""

from __future__ import annotations

import json

import pytest

from detok.parsing.output import OutputParser
from detok.parsing.registry import ParserConfigError, marker_token_ids, tool_parser_class, tool_parsers
from detok.parsing.tools import FAMILIES
from detok.parsing.tools.core import MAX_TOOL_CALLS
from detok.parsing.tools import HermesToolParser
from detok.parsing.tools import Qwen3CoderToolParser
from detok.parsing.types import OutputParsing, Piece
from tests.helpers.tool_pieces import marker_ids, marker_runs, single_token_id, text_pieces, token_pieces
from tests.helpers.tool_parsing import assert_valid_arguments, run_all_groupings, run_parser, tools_of

# one call per family, as text with its markers
ONE_CALL = {
    "hermes": '<tool_call>{"name": "f", "arguments": {"a": "b", "n": [1, 2.5, true, null]}}</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=f>\n<parameter=a>\nb\n</parameter>\n<parameter=n>\n[1, 2.5]\n</parameter>\n"
                   "</function>\n</tool_call>",
    "llama3_json": '{"name": "f", "parameters": {"a": "b", "n": [1, 2.5, true, null]}}',
    "mistral": '[TOOL_CALLS]f[ARGS]{"a": "b", "n": [1, 2.5, true, null]}',
    "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
                   '{"a": "b", "n": [1, 2.5, true, null]}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek_v31": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{"a": "b", "n": [1, 2.5, true, null]}'
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
               '{"a": "b", "n": [1, 2.5, true, null]}<|tool_call_end|><|tool_calls_section_end|>',
    "glm45": "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>b</arg_value>\n<arg_key>n</arg_key>\n"
             "<arg_value>[1, 2.5]</arg_value>\n</tool_call>",
    # the table families (detok.parsing.family_tables)
    "qwen3_xml": "<tool_call>\n<function=f>\n<parameter=a>\nb\n</parameter>\n<parameter=n>\n[1, 2.5]\n</parameter>\n"
                 "</function>\n</tool_call>",
    "step3p5": "<tool_call>\n<function=f>\n<parameter=a>\nb\n</parameter>\n<parameter=n>\n[1, 2.5]\n</parameter>\n"
               "</function>\n</tool_call>",
    "seed_oss": "<seed:tool_call>\n<function=f>\n<parameter=a>b</parameter>\n<parameter=n>[1, 2.5]</parameter>\n"
                "</function>\n</seed:tool_call>",
    "qwen3_json": '<tool_call>{"name": "f", "arguments": {"a": "b", "n": [1, 2.5, true, null]}}</tool_call>',
    "pythonic": "[f(a='b', n=[1, 2.5, True, None])]",
    "llama4_pythonic": "<|python_start|>[f(a='b', n=[1, 2.5, True, None])]<|python_end|>",
    "granite4": '<tool_call>{"name": "f", "arguments": {"a": "b", "n": [1, 2.5, true, null]}}</tool_call>',
    "minimax_m2": '<minimax:tool_call>\n<invoke name="f">\n<parameter name="a">b</parameter>\n'
                  '<parameter name="n">[1, 2.5]</parameter>\n</invoke>\n</minimax:tool_call>',
    "deepseek_v32": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">b'
                    '</｜DSML｜parameter>\n<｜DSML｜parameter name="n" string="false">[1, 2.5]</｜DSML｜parameter>\n'
                    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "deepseek_v4": '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">b'
                   '</｜DSML｜parameter>\n<｜DSML｜parameter name="n" string="false">[1, 2.5]</｜DSML｜parameter>\n'
                   "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "gemma4": '<|tool_call>call:f{a:<|"|>b<|"|>,n:[1,2.5,true,null]}<tool_call|>',
    "kimi_k3": '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="string"<|sep|>b'
               '<|close|>argument<|sep|><|open|>argument key="n" type="array"<|sep|>[1, 2.5]<|close|>argument<|sep|>'
               "<|close|>call<|sep|><|close|>tools<|sep|>",
    # Harmony (gpt-oss): a commentary-channel message addressed to the function
    "openai": "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
              '{"a": "b", "n": [1, 2.5, true, null]}<|call|>',
}
TOOLS = tools_of(("f", {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "array"}}}))


def test_every_family_is_covered() -> None:
    assert {f.names[0] for f in FAMILIES} == set(ONE_CALL)


# Harmony arguments pass through as written, JSON or not (vLLM's behaviour; docs/reasoning-and-tools.md,
# differences)
JSON_CHECKED = sorted(set(ONE_CALL) - {"openai"})


@pytest.mark.parametrize("name", JSON_CHECKED)
def test_cut_at_every_point_is_valid_and_grouping_free(name: str) -> None:
    family = tool_parser_class(name)
    text = ONE_CALL[name]
    pieces = text_pieces(text, family.markers)
    for cut in range(len(pieces) + 1):  # (any grouping of such texts: test_tools_properties.py)
        result = run_all_groupings(family, pieces[:cut], few=True, tools=TOOLS, token_markers=frozenset(family.markers))
        assert len(result.calls) <= 1
        if result.calls:
            assert result.calls[0].name == "f"
    full = run_parser(family, pieces, tools=TOOLS, token_markers=frozenset(family.markers))
    assert full.content == "" and [c.name for c in full.calls] == ["f"]


# as many calls again past the bound: each dropped one parsed through (one character a piece)
MANY_CALLS = 2 * MAX_TOOL_CALLS


@pytest.mark.parametrize("name", sorted(ONE_CALL))
def test_calls_past_the_bound_emit_max_tool_calls(name: str) -> None:
    family = tool_parser_class(name)
    text = ONE_CALL[name]
    if name in ("deepseek_v3", "deepseek_v31", "kimi_k2"):  # one section, many calls
        head, tail = text.index("<", 1), text.rindex("<")
        text = text[:head] + text[head:tail] * MANY_CALLS + text[tail:]
    elif name in ("pythonic", "llama4_pythonic"):  # one list, many calls
        head, tail = text.index("[") + 1, text.rindex("]")
        text = text[:head] + ", ".join([text[head:tail]] * MANY_CALLS) + text[tail:]
    else:
        text = (text + ("; " if name == "llama3_json" else "")) * MANY_CALLS
    pieces = text_pieces(text, family.markers)
    result = run_parser(family, pieces, tools=TOOLS, token_markers=frozenset(family.markers))
    assert len(result.calls) == MAX_TOOL_CALLS
    assert result.content == ""
    assert_valid_arguments(result)


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "deepseek_v31", "kimi_k2"])
def test_huge_arguments_stream_as_they_arrive(name: str) -> None:
    """200 000 characters of one string argument in 7-character pieces: every piece's text goes out
    at once (nothing held but a possible escape), and the result is the exact text."""
    family = tool_parser_class(name)
    big = "x\\n\\u00e9\\\"" * 20000
    text = ONE_CALL[name].replace('"b"', f'"{big}"')
    pieces: list[Piece] = []
    for p in marker_runs(text, family.markers):
        pieces += [p] if p.marker is not None else [Piece(p.text[i : i + 7]) for i in range(0, len(p.text), 7)]
    if pieces[-1].marker is not None or len(pieces[-1].text) == 7:
        pieces.append(Piece(""))  # (and an empty piece last, unless the text ends mid-piece)
    parser = family(tools=TOOLS, token_markers=frozenset(family.markers), call_id=lambda i: f"id{i}")
    sent = silent = 0
    for p in pieces:
        _, deltas = parser.feed(p)
        sent += sum(len(d.arguments) for d in deltas)
        silent += not deltas
    assert silent < len(pieces) // 100  # nearly every piece's text goes out in the same feed
    _, deltas = parser.finish()
    sent += sum(len(d.arguments) for d in deltas)
    assert sent > len(big)


@pytest.mark.parametrize("name", JSON_CHECKED)
@pytest.mark.parametrize("junk", ['{"a": tru e}', '{"a" "b"}', '{"a": 1,, }', '{{{{', '"unterminated', "]]]", "{\x00}"])
def test_broken_arguments_give_valid_json_or_no_call(name: str, junk: str) -> None:
    family = tool_parser_class(name)
    text = ONE_CALL[name].replace('{"a": "b", "n": [1, 2.5, true, null]}', junk)
    pieces = text_pieces(text, family.markers)
    run_all_groupings(family, pieces, tools=TOOLS, token_markers=frozenset(family.markers))


def test_a_name_not_in_the_tools_is_emitted_as_written() -> None:
    pieces = text_pieces('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', ["<tool_call>", "</tool_call>"])
    result = run_parser(HermesToolParser, pieces, tools=TOOLS, token_markers=frozenset({"<tool_call>", "</tool_call>"}))
    assert [(c.name, c.arguments) for c in result.calls] == [("nope", "{}")]


def test_names_and_aliases_resolve() -> None:
    table = tool_parsers()
    for name in ["hermes", "qwen25", "qwen3_coder", "llama3_json", "llama4_json", "llama3", "mistral", "deepseek_v3",
                 "deepseekv3", "deepseek_v31", "deepseekv31", "kimi_k2", "glm45", "glm47", "glm"]:
        assert name in table, name
    with pytest.raises(ParserConfigError, match="unknown tool-call parser 'nope'"):
        tool_parser_class("nope")


def test_deepseek_on_a_vocabulary_without_its_tokens_is_an_error(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParserConfigError, match="deepseek_v3"):
        marker_token_ids(tool_parser_class("deepseek_v3"), single_token_id(qwen3_tok))


def test_output_parser_end_to_end_on_qwen3(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    """The composite the worker uses: marker ids found by the tokenizer, calls typed by the schema,
    ids deterministic from the seed."""
    parsing = OutputParsing(tool_parser="qwen3_coder", tools=TOOLS, call_id_seed="r1")
    text = "Sure." + ONE_CALL["qwen3_coder"]
    outs = []
    for _ in range(2):
        parser = OutputParser(parsing, single_token_id(qwen3_tok))
        assert set(parser.marker_ids.values()) == {"<tool_call>", "</tool_call>"}
        deltas = [parser.feed(p) for p in token_pieces(qwen3_tok, text, parser.marker_ids)] + [parser.finish()]
        content = "".join(d.content for d in deltas)
        calls = [c for d in deltas for c in d.tool_calls]
        outs.append((content, calls))
        assert parser.calls_emitted == 1
    assert outs[0] == outs[1]
    content, calls = outs[0]
    assert content == "Sure."
    assert calls[0].name == "f" and calls[0].id.startswith("call_")
    assert json.loads("".join(c.arguments for c in calls)) == {"a": "b", "n": [1, 2.5]}
    assert marker_ids(Qwen3CoderToolParser, qwen3_tok)
