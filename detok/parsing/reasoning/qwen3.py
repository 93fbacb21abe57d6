"""Qwen3 / Qwen3.5 / Qwen3.6: `<think>`...`</think>`, thinking on unless the request turns it off.

As vLLM's current `qwen3` parser: Qwen3.5+ templates put `<think>` in the prompt, so output without
`</think>` is reasoning (truncated thinking) unless `enable_thinking` is false (`starts_in_reasoning`
False: then only `<think>`...`</think>` the model writes is reasoning). A `<think>` the model writes is
dropped. Qwen3.5 may open `<tool_call>` without closing `</think>`: that ends reasoning, but only when
`<function=` / `<function ` follows (after whitespace), so a `<tool_call>` merely mentioned while
thinking stays reasoning (vLLM's lookahead). SGLang's `qwen3` and `qwen3-thinking` are aliases.
"""

from __future__ import annotations

import re

from detok.parsing.reasoning.think import ThinkParser


class Qwen3Parser(ThinkParser):
    names = ("qwen3", "qwen3-thinking")
    markers = ("<think>", "</think>", "<tool_call>")
    default_starts_in_reasoning = True
    implicit_end = "<tool_call>"
    implicit_confirm = re.compile(r"<function[\s=]")
    implicit_confirm_prefix = "<function"
