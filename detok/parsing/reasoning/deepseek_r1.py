"""DeepSeek-R1: `<think>`...`</think>`, and the output starts inside reasoning unless told otherwise.

As vLLM's `deepseek_r1` (and SGLang's `deepseek-r1`, which forces reasoning): R1 often omits `<think>`
(its template opens it in the prompt), so everything before `</think>` is reasoning; a `<think>` the
model does write is dropped.
"""

from __future__ import annotations

from detok.parsing.reasoning.think import ThinkParser


class DeepSeekR1Parser(ThinkParser):
    names = ("deepseek_r1", "deepseek-r1")
    markers = ("<think>", "</think>")
    default_starts_in_reasoning = True
