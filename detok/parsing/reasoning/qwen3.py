"""Qwen3 / Qwen3.5 / Qwen3.6: `<think>`...`</think>`, thinking on unless the request turns it off.

As vLLM's `qwen3` grammar: Qwen3.5+ templates put `<think>` in the prompt, so output without
`</think>` is reasoning (truncated thinking) unless `enable_thinking` is false (`starts_in_reasoning`
False: then only `<think>`...`</think>` the model writes is reasoning). A `<think>` the model writes is
dropped. The model may open a tool call straight from its thought, without `</think>`: `<tool_call>`
then ends reasoning, in either call format Qwen models write - Qwen3.5's XML (`<function=`) for the
qwen3_coder parser, or Qwen3 / Qwen3-2507's JSON object (`{`) for the hermes parser - once that text
follows (after whitespace), so a `<tool_call>` merely mentioned while thinking stays reasoning (vLLM's
lookahead). SGLang's `qwen3` and `qwen3-thinking` are aliases.
"""

from __future__ import annotations

import re

from detok.parsing.reasoning.think import ThinkParser


class Qwen3Parser(ThinkParser):
    names = ("qwen3", "qwen3-thinking")
    markers = ("<think>", "</think>", "<tool_call>")
    default_starts_in_reasoning = True
    implicit_end = "<tool_call>"
    implicit_confirm = re.compile(r"<function[\s=]|\{")
    implicit_confirm_prefixes = ("<function", "{")
