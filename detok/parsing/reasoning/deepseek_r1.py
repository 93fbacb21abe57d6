"""DeepSeek-R1 / V3.1+ thinking: `<think>`...`</think>`, and the output starts inside reasoning unless
told otherwise.

As vLLM's `deepseek_r1` (and SGLang's `deepseek-r1`, which forces reasoning): R1 often omits `<think>`
(its template opens it in the prompt), so everything before `</think>` is reasoning; a `<think>` the
model does write is dropped. A calls section opened straight from the thought
(`<｜tool▁calls▁begin｜>`, a special token nothing else writes) ends reasoning and stays in the content
for the deepseek tool parsers, as a tool-call start does in vLLM's grammars.
"""

from __future__ import annotations

from detok.parsing.reasoning.think import ThinkParser


class DeepSeekR1Parser(ThinkParser):
    names = ("deepseek_r1", "deepseek-r1")
    markers = ("<think>", "</think>", "<｜tool▁calls▁begin｜>")
    default_starts_in_reasoning = True
    implicit_end = "<｜tool▁calls▁begin｜>"
