"""Properties of every tool-call family, by hypothesis: for any text made of the family's markers,
JSON pieces and words, (1) feeding it in any grouping gives the same content and the same calls
(index, id, name, joined arguments) as feeding it at once; (2) each call's first delta carries its id
and name, later ones only arguments (checked by `run_parser`); (3) every call's joined arguments are
valid JSON. Markers are fed as marker pieces (as the worker does for one-token markers; their text
the marker's own or, as where skip_special_tokens skipped it, none) or, for the plain-text run, as
text."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.tools import FAMILIES
from detok.parsing.types import Piece
from tests.helpers.tool_pieces import all_at_once, text_pieces
from tests.helpers.tool_parsing import assert_valid_arguments, run_parser, tools_of

JSON_BITS = ['{"name": "f", "arguments": {"a": 1}}', '{"name": "g", "parameters": ', '{"name": "h"',
             '"arguments": ', '{"x": "y\\n', '"', "{", "}", "[", "]", ",", ":", " ", "\n", "\\", "\\u00e9", "1.5",
             "-", "e", "true", "nul", "é", "🫨", ";", "a", "```json\n", "functions.f:0", "0"]
XML_BITS = ["<function=f>", "<parameter=a>", "<parameter=n>", "</parameter>", "</function>", "<function=", ">",
            "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "get_weather", "function", "[ARGS]", "[CALL_ID]"]
# whole calls of each family, so random texts hold real calls too
SNIPPETS = {
    "hermes": ['<tool_call>{"name": "f", "arguments": {"a": "x"}}</tool_call>', '<tool_call>\n{"name": "g", '],
    "qwen3_coder": ["<tool_call>\n<function=f>\n<parameter=a>\nv\n</parameter>\n", "<parameter=n>\n7\n</parameter>"],
    "llama3_json": ['{"name": "f", "parameters": {"a": "x"}}; ', '<|python_tag|>{"name": "g", "arguments": '],
    "mistral": ['[TOOL_CALLS]f[ARGS]{"a": "x"}', '[TOOL_CALLS][{"name": "f", "arguments": {}}, ', "[TOOL_CALLS]g{"],
    "deepseek_v3": ["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```"],
    "deepseek_v31": ["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜>"],
    "kimi_k2": ["<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1}",
                "<|tool_call_begin|>0<|tool_call_argument_begin|>"],
    "glm45": ["<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>x y</arg_value>\n", "<arg_key>n</arg_key><arg_value>"],
    "qwen3_xml": ["<tool_call>\n<function=f>\n<parameter=a>\nv\n</parameter>\n", "<parameter=n>\n7\n</parameter>"],
    "step3p5": ["<tool_call>\n<function=f>\n<parameter=a>\nv\n</parameter>\n", "<parameter=n>\n7\n</parameter>"],
    "seed_oss": ["<seed:tool_call>\n<function=f>\n<parameter=a>v</parameter>\n", "</function>\n</seed:tool_call>"],
    "qwen3_json": ['<tool_call>{"name": "f", "arguments": {"a": "x"}}</tool_call>', '<tool_call>\n{"name": "g", '],
    "pythonic": ["[f(a='x', n=7)]", "[g(), f(a=[1, {'k': None}])", " text"],
    "llama4_pythonic": ["<|python_start|>[f(a='x')]<|python_end|>", "[g(n=1)]", "<|python_start|>["],
    "granite4": ['<tool_call>{"name": "f", "arguments": {"a": "x"}}</tool_call>', '<tool_call>{"arguments": {}, '],
    "minimax_m2": ['<minimax:tool_call>\n<invoke name="f">\n<parameter name="a">v</parameter>\n',
                   '<parameter name="n">7</parameter></invoke>\n</minimax:tool_call>', '<invoke name=f>'],
    "deepseek_v32": ['<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">v',
                     '</｜DSML｜parameter>\n<｜DSML｜parameter name="b" string="false">[1]</｜DSML｜parameter>',
                     "</｜DSML｜invoke>\n</｜DSML｜function_calls>"],
    "deepseek_v4": ['<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">v',
                    '</｜DSML｜parameter>\n<｜DSML｜parameter name="n" string="false">7</｜DSML｜parameter>',
                    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"],
    "gemma4": ['<|tool_call>call:f{a:<|"|>x, y<|"|>,n:7}<tool_call|>', "<|tool_call>call:g{a:{k:[<|\"|>v",
               "<|tool_call>:f{}", "}<tool_call|>"],
    "kimi_k3": ['<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="string"<|sep|>v',
                "<|close|>argument<|sep|><|close|>call<|sep|>", '<|open|>argument key="n" type="integer"<|sep|>7',
                "<|open|>response<|sep|>hi<|close|>response<|sep|>", "<|close|>tools<|sep|><|close|>message<|sep|>"],
    "openai": ['<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": "x"}<|call|>',
               "<|channel|>final<|message|>done<|end|>", "<|channel|>analysis<|message|>hm<|end|>"],
}
TOOLS = tools_of(("f", {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}),
                 ("g", {"type": "object", "properties": {"a": {"type": "object"}}}))


def fragments(family: type) -> st.SearchStrategy[str]:
    return st.sampled_from(list(family.markers) + JSON_BITS + XML_BITS + SNIPPETS[family.names[0]] * 3)


@st.composite
def case(draw: st.DrawFn) -> tuple[type, str, list[int], bool, bool]:
    family = draw(st.sampled_from(FAMILIES))
    text = "".join(draw(st.lists(fragments(family), max_size=40)))
    cuts = draw(st.lists(st.integers(1, 6), max_size=60))
    as_tokens = draw(st.booleans())
    skipped = as_tokens and draw(st.booleans())
    return family, text, cuts, as_tokens, skipped


def grouped(pieces: list[Piece], cuts: list[int]) -> list[Piece]:
    out: list[Piece] = []
    run: list[str] = []
    sizes = iter(cuts)
    want = next(sizes, 3)
    for p in pieces:
        if p.marker is not None:
            if run:
                out.append(Piece("".join(run)))
                run = []
            out.append(p)
            continue
        run.append(p.text)
        if len(run) >= want:
            out.append(Piece("".join(run)))
            run, want = [], next(sizes, 3)
    if run:
        out.append(Piece("".join(run)))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_any_grouping_gives_the_result_of_all_at_once(c: tuple[type, str, list[int], bool, bool]) -> None:
    family, text, cuts, as_tokens, skipped = c
    markers = list(family.markers) if as_tokens else []
    pieces = text_pieces(text, markers)
    if skipped:
        pieces = [Piece("", p.marker) if p.marker else p for p in pieces]
    kwargs = {"tools": TOOLS, "token_markers": frozenset(markers)}
    whole = run_parser(family, all_at_once(pieces), **kwargs)
    assert_valid_arguments(whole)
    parts = run_parser(family, grouped(pieces, cuts), **kwargs)
    assert parts.summary() == whole.summary()
    for call in whole.calls:
        json.loads(call.arguments)
