"""GLM-4.5 / 4.6 / 4.7: `<think>`...`</think>`; vLLM's `glm45` (= `glm47`, one engine config).

Thinking is on by default (GLM-4.7's template opens `<think>` in the prompt; GLM-4.5 writes it, and
a written `<think>` is dropped either way). `<tool_call>` inside reasoning ends it (GLM's call is
`<tool_call>NAME<arg_key>...`, nothing to confirm; SGLang's `glm45` tool_start_token does the same),
and a `<think>` in the answer opens another reasoning block (vLLM: CONTENT + THINK_START).
"""

from __future__ import annotations

from detok.parsing.reasoning.think import ThinkParser


class Glm45Parser(ThinkParser):
    names = ("glm45", "glm47")
    markers = ("<think>", "</think>", "<tool_call>")
    default_starts_in_reasoning = True
    implicit_end = "<tool_call>"
    reopen = True
