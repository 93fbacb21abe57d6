"""Kimi K2 (thinking): `<think>`...`</think>`; vLLM's and SGLang's `kimi_k2`.

Thinking is on unless the request's `thinking` kwarg turns it off (then `starts_in_reasoning` False);
a written `<think>` is dropped. The tool-call section `<|tool_calls_section_begin|>` ends reasoning
without `</think>` and stays in the content for the kimi_k2 tool parser.
"""

from __future__ import annotations

from detok.parsing.reasoning.think import ThinkParser


class KimiK2Parser(ThinkParser):
    names = ("kimi_k2",)
    markers = ("<think>", "</think>", "<|tool_calls_section_begin|>")
    default_starts_in_reasoning = True
    implicit_end = "<|tool_calls_section_begin|>"
