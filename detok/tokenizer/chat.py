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
from typing import Any, Literal, NoReturn, Protocol

import jinja2
import jinja2.meta
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment



class _SpecialTokenNames(Protocol):
    additional: tuple[str, ...]

    def named(self) -> dict[str, str]: ...


class Tokenizer(Protocol):
    """What rendering needs of a tokenizer (`detok.tokenizer.base.Tokenizer` has it); a structural
    type, so this module does not import the tokenizer base that calls it."""

    source: str

    @property
    def special_tokens(self) -> _SpecialTokenNames: ...

    @property
    def chat_template(self) -> str | None: ...

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
        compiled = env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template syntax error at line {e.lineno}: {e.message}") from None
    # Jinja keeps a template's globals as a ChainMap over the environment's, and every render
    # copies them into a dict and a set by iterating it: a large share of a short chat render. The
    # environment is this template's own and never changes, so one flat dict is the same names.
    compiled.globals = dict(compiled.globals)
    return compiled


def _special_token_variables(tok: Tokenizer) -> dict[str, Any]:
    special = tok.special_tokens
    # The named ones made once per special-tokens object (`named()` walks dataclass fields and a
    # frozen dataclass hashes in Python: too dear per render), found by identity; the entry holds the
    # object, so its id is not reused while the entry stands.
    entry = _NAMED_TOKENS.get(id(special))
    if entry is None or entry[0] is not special:
        if len(_NAMED_TOKENS) >= _COMPILED_CACHE_SIZE:
            _NAMED_TOKENS.clear()
        entry = _NAMED_TOKENS[id(special)] = (special, {f"{name}_token": value for name, value in special.named().items()})
    return {**entry[1], "additional_special_tokens": list(special.additional)}


_NAMED_TOKENS: dict[int, tuple[object, dict[str, str]]] = {}  # read only: callers copy the dict


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


# ---- messages as templates receive them ---------------------------------------------------------

ContentFormat = Literal["string", "openai"]


class ToolCallArguments(dict[str, Any]):
    """A tool call's `function.arguments`: the parsed JSON object (what transformers-era templates
    expect: `| tojson`, `.items()`), printing as the JSON text the client sent (`{{ arguments }}`)."""

    __slots__ = ("raw",)

    def __init__(self, parsed: dict[str, Any], raw: str) -> None:
        super().__init__(parsed)
        self.raw = raw

    def __str__(self) -> str:
        return self.raw


def _names_bound_to(root: nodes.Template, source: str) -> set[str]:
    """`source` and every variable assigned from it (`{% set msgs = messages[1:] %}` ...)."""
    names = {source}
    changed = True
    while changed:
        changed = False
        for assign in root.find_all(nodes.Assign):
            if isinstance(assign.target, nodes.Name) and assign.target.name not in names:
                if _reads(assign.node, names, None):
                    names.add(assign.target.name)
                    changed = True
    return names


def _reads(node: nodes.Node, names: set[str], key: str | None) -> bool:
    """Is `node` one of `names` (or its `key` item), possibly sliced, filtered or tested?"""
    while True:
        if isinstance(node, (nodes.Filter, nodes.Test)) and node.node is not None:
            node = node.node
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            node = node.node
        else:
            break
    if key is None:
        return isinstance(node, nodes.Name) and node.ctx == "load" and node.name in names
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == key:
        return _reads(node.node, names, None)
    if isinstance(node, nodes.Getattr) and node.attr == key:
        return _reads(node.node, names, None)
    return False


def _loop_targets(root: nodes.Template, names: set[str], key: str | None) -> set[str]:
    return {
        loop.target.name
        for loop in root.find_all(nodes.For)
        if isinstance(loop.target, nodes.Name) and _reads(loop.iter, names, key)
    }


@functools.lru_cache(maxsize=_COMPILED_CACHE_SIZE)
def template_content_format(template: str) -> ContentFormat:
    """How a template wants message content, detected as vLLM's "auto" content format does: a
    template that loops over a message's `content` gets the list of parts ("openai"); any other
    gets the text parts joined with newlines ("string", also for a template that does not parse)."""
    try:
        root = compile_chat_template(template).environment.parse(template)
    except (ChatTemplateError, jinja2.TemplateSyntaxError):
        return "string"
    message_vars = _loop_targets(root, _names_bound_to(root, "messages"), None)
    return "openai" if message_vars and _loop_targets(root, message_vars, "content") else "string"


@functools.lru_cache(maxsize=_COMPILED_CACHE_SIZE)
def template_variables(template: str) -> frozenset[str]:
    """The variables a template reads from its caller (jinja2.meta's undeclared variables)."""
    try:
        root = compile_chat_template(template).environment.parse(template)
    except (ChatTemplateError, jinja2.TemplateSyntaxError):
        return frozenset()
    return frozenset(jinja2.meta.find_undeclared_variables(root))
