"""Reasoning parser names (vLLM's, SGLang's as aliases) and the start-time marker check."""

from __future__ import annotations

import pytest

from detok.parsing.output import OutputParser
from detok.parsing.registry import ParserConfigError, reasoning_parser_class, reasoning_parsers, tool_parser_class
from detok.parsing.types import OutputParsing
from tests.helpers.parsing_pieces import single_token
from tests.parsing import vocabularies as voc

VLLM = {"deepseek_r1", "qwen3", "glm45", "kimi_k2", "mistral", "openai_gptoss"}
SGLANG = {"deepseek-r1": "deepseek_r1", "qwen3": "qwen3", "qwen3-thinking": "qwen3", "glm45": "glm45",
          "kimi_k2": "kimi_k2", "mistral": "mistral", "gpt-oss": "openai_gptoss"}


def test_vllm_names_and_sglang_aliases() -> None:
    table = reasoning_parsers()
    assert VLLM <= set(table)
    for alias, name in SGLANG.items():
        assert table[alias] is table[name]
    assert tool_parser_class("openai") is tool_parser_class("gpt-oss")


def test_unknown_name_is_an_error_naming_it() -> None:
    with pytest.raises(ParserConfigError, match="deepseek_r2"):
        reasoning_parser_class("deepseek_r2")


def test_mistral_needs_think_tokens() -> None:
    with pytest.raises(ParserConfigError, match=r"mistral.*\[THINK\]"):
        OutputParser(OutputParsing(reasoning_parser="mistral"), single_token(voc.qwen()))
    op = OutputParser(OutputParsing(reasoning_parser="mistral"), single_token(voc.mistral()))
    assert set(op.marker_ids.values()) == {"[THINK]", "[/THINK]", "[TOOL_CALLS]"}


def test_markers_found_by_id_on_each_vocabulary() -> None:
    """The worker cuts steps at these ids: single tokens only, the rest matched in text."""
    assert set(OutputParser(OutputParsing(reasoning_parser="qwen3"), single_token(voc.qwen())).marker_ids.values()) == {
        "<think>", "</think>", "<tool_call>"}
    assert set(OutputParser(OutputParsing(reasoning_parser="qwen3"), single_token(voc.deepseek())).marker_ids.values()) == {
        "<think>", "</think>"}
    assert OutputParser(OutputParsing(reasoning_parser="qwen3"), single_token(voc.gpt2())).marker_ids == {}
    harmony = OutputParser(OutputParsing(reasoning_parser="openai_gptoss", tool_parser="openai"), single_token(voc.harmony()))
    assert len(harmony.marker_ids) == 7
