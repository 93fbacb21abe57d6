"""Chat templates: render a tokenizer's Jinja chat template the way transformers does.

Same environment as transformers' `apply_chat_template` (sandboxed, trim_blocks and lstrip_blocks,
loop controls, the `{% generation %}` block), the same helpers (`raise_exception`, `strftime_now`,
a `tojson` that keeps non-ASCII text and takes `indent`) and the same variables (`messages`,
`tools`, `add_generation_prompt`, the special tokens as `bos_token`, `eos_token`, ... and any extra
keyword), so a model's template renders here exactly as it would in transformers.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

if TYPE_CHECKING:
    from detok.tokenizer.base import Tokenizer

_COMPILED_CACHE_SIZE = 64


class ChatTemplateError(ValueError):
    """No chat template, a template that does not compile, or one that refuses the messages."""


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks in
    transformers; when only rendering text, the block is its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters and forces ASCII; templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=_COMPILED_CACHE_SIZE)
def compile_chat_template(template: str) -> jinja2.Template:
    """Compile once per template string (tokenizers sharing a template share the compiled form)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template syntax error at line {e.lineno}: {e.message}") from None


def _special_token_variables(tok: Tokenizer) -> dict[str, Any]:
    special = tok.special_tokens
    variables: dict[str, Any] = {f"{name}_token": value for name, value in special.named().items()}
    variables["additional_special_tokens"] = list(special.additional)
    return variables


def _final_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text of the last message: its content string, or the last text block of a list."""
    content = messages[-1].get("content") if messages else None
    if isinstance(content, list):
        texts = [block["text"] for block in content if isinstance(block, dict) and "text" in block]
        content = texts[-1] if texts else None
    if not isinstance(content, str):
        raise ChatTemplateError("continue_final_message needs a final message with text content")
    return content


def _cut_after_final_message(rendered: str, final: str) -> str:
    """Drop whatever the template appended after the final message (its end-of-turn tokens), so a
    generation continues that message; keep the message's trailing spaces if the template did."""
    stripped = final.strip()
    if stripped not in rendered:
        raise ChatTemplateError(
            "continue_final_message is set but the final message does not appear in the rendered chat"
        )
    start = rendered.rindex(stripped)
    kept = final.lstrip()
    if rendered[start : start + len(kept)] == kept:
        return rendered[: start + len(kept)]
    return rendered[: start + len(stripped)]


def render_chat_template(
    tok: Tokenizer,
    messages: Sequence[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: Sequence[dict[str, Any]] | None = None,
    continue_final_message: bool = False,
    **kwargs: Any,
) -> str:
    """Render `messages` with the tokenizer's chat template; extra keywords become template variables."""
    template = tok.chat_template
    if template is None:
        raise ChatTemplateError(
            f"tokenizer {tok.source!r} has no chat template: pass one to "
            "load_tokenizer(..., chat_template='template.jinja' or a template string), "
            "or call tok.set_chat_template(template)"
        )
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt cannot both be set: the first continues "
            "the last message, the second starts a new assistant turn"
        )
    compiled = compile_chat_template(template)
    variables = {
        **_special_token_variables(tok),
        **kwargs,
        "messages": list(messages),
        "tools": list(tools) if tools is not None else None,
        "add_generation_prompt": add_generation_prompt,
    }
    try:
        rendered = compiled.render(**variables)
    except ChatTemplateError:
        raise
    except Exception as e:  # the template's own runtime errors (undefined, type, sandbox, ...)
        raise ChatTemplateError(f"rendering the chat template failed: {type(e).__name__}: {e}") from e
    if continue_final_message:
        rendered = _cut_after_final_message(rendered, _final_text(messages))
    return rendered
