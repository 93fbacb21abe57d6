"""Mistral (Magistral, Mistral-Small 3.2+/4 with reasoning): `[THINK]`...`[/THINK]` special tokens;
vLLM's and SGLang's `mistral`.

The output starts as answer text; `[THINK]` opens reasoning (also again later: vLLM's Mistral config
goes CONTENT + THINK_START -> REASONING), `[/THINK]` closes it, and `[TOOL_CALLS]` inside reasoning
ends it and stays in the content for the mistral tool parser. The markers must be single tokens
(control tokens of Tekken v13+), as vLLM requires.
"""

from __future__ import annotations

from detok.parsing.reasoning.think import ThinkParser


class MistralParser(ThinkParser):
    names = ("mistral",)
    start = "[THINK]"
    end = "[/THINK]"
    markers = ("[THINK]", "[/THINK]", "[TOOL_CALLS]")
    required_tokens = ("[THINK]", "[/THINK]")
    implicit_end = "[TOOL_CALLS]"
    reopen = True
