"""Reasoning then tools, composed by OutputParser as a worker runs them: a tool call that ends reasoning
implicitly (Qwen3's `<tool_call>` without `</think>`, in either call format,
DeepSeek's calls section, Kimi's tool section, GLM's `<tool_call>`,
Mistral's `[TOOL_CALLS]`) reaches the tool parser with its marker; any grouping gives the same result."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing, Piece, ToolSpec
from detok.tokenizer.base import Tokenizer
from tests.helpers.parsing_pieces import regroup, run_pieces, single_token, token_pieces
from tests.parsing import vocabularies as voc
from tests.parsing.test_harmony import assemble, parse

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "60"))
BASH = (ToolSpec("bash", {"type": "object", "properties": {"command": {"type": "string"}}}),)

HERMES_CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
QWEN_CALL = "<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>"
# (id, vocabulary, reasoning parser, tool parser, output, reasoning, content, calls)
CASES: list[tuple[str, Callable[[], Tokenizer], str, str, str, str, str, list[tuple[str, dict]]]] = [
    ("qwen3_closed", voc.qwen, "qwen3", "qwen3_coder", "<think>plan</think>\n\n" + QWEN_CALL, "plan", "\n\n", [("bash", {"command": "ls -la"})]),
    ("qwen3_implicit_end", voc.qwen, "qwen3", "qwen3_coder", "plan\n\n" + QWEN_CALL, "plan\n\n", "", [("bash", {"command": "ls -la"})]),
    ("qwen3_mention_then_call", voc.qwen, "qwen3", "qwen3_coder", "use <tool_call> later</think>ok " + QWEN_CALL, "use <tool_call> later", "ok ", [("bash", {"command": "ls -la"})]),
    ("qwen3_text_markers", voc.gpt2, "qwen3", "qwen3_coder", "plan\n" + QWEN_CALL, "plan\n", "", [("bash", {"command": "ls -la"})]),
    ("qwen3_hermes", voc.qwen, "qwen3", "hermes", '<think>p</think>A<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>', "p", "A", [("bash", {"command": "ls"})]),
    ("qwen3_hermes_no_think", voc.qwen, "qwen3", "hermes", HERMES_CALL, "", "", [("bash", {"command": "ls"})]),
    ("qwen3_hermes_implicit_end", voc.qwen, "qwen3", "hermes", "plan\n" + HERMES_CALL, "plan\n", "", [("bash", {"command": "ls"})]),
    ("qwen3_hermes_text_markers", voc.gpt2, "qwen3", "hermes", "plan " + HERMES_CALL, "plan ", "", [("bash", {"command": "ls"})]),
    ("qwen3_hermes_mention_stays_reasoning", voc.qwen, "qwen3", "hermes", "a <tool_call> tag</think>done", "a <tool_call> tag", "done", []),
    ("deepseek_r1_calls_end_reasoning", voc.deepseek, "deepseek_r1", "deepseek_v31",
     "plan<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{\"command\": \"ls\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "plan", "", [("bash", {"command": "ls"})]),
    ("deepseek_r1_plain", voc.deepseek, "deepseek_r1", "deepseek_v3", "think</think>answer", "think", "answer", []),
    ("glm45_implicit_end", voc.qwen, "glm45", "glm45",
     "<think>plan<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n</tool_call>", "plan", "", [("bash", {"command": "ls"})]),
    ("kimi_k2_section_ends_reasoning", voc.qwen_kimi, "kimi_k2", "kimi_k2",
     'plan<|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0<|tool_call_argument_begin|>{"command": "ls"}'
     "<|tool_call_end|><|tool_calls_section_end|>", "plan", "", [("bash", {"command": "ls"})]),
    ("mistral_tool_calls_end_reasoning", voc.mistral, "mistral", "mistral", '[THINK]plan[TOOL_CALLS]bash[ARGS]{"command": "ls"}', "plan", "", [("bash", {"command": "ls"})]),
]


def run(case: tuple, cut: Callable[..., list[Piece]]) -> tuple[str, str, list[tuple[str, str]]]:
    _, vocab, rp, tp, output, *_ = case
    tok = vocab()
    op = OutputParser(OutputParsing(reasoning_parser=rp, tool_parser=tp, tools=BASH, call_id_seed="s"), single_token(tok))
    ids = tok.encode(output)
    reasoning, content, deltas = parse(op, cut(tok, ids, op.marker_ids))
    return reasoning, content, assemble(deltas)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("cut", [token_pieces, run_pieces], ids=["per_token", "per_run"])
def test_reasoning_then_tools(case: tuple, cut: Callable[..., list[Piece]]) -> None:
    reasoning, content, calls = run(case, cut)
    assert (reasoning, content) == (case[5], case[6])
    assert [(n, json.loads(a)) for n, a in calls] == case[7]


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**32))
def test_any_grouping_same_result(case: tuple, seed: int) -> None:
    rng = random.Random(seed)
    assert run(case, lambda t, i, m: regroup(token_pieces(t, i, m), rng, 0.5)) == run(case, run_pieces)
