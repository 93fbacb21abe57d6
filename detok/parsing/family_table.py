"""Families as tables: a family that differs from another only in its terminals and start state is a
`FamilyTable` (data), made a parser class by `family_class`, not a module of code.

A table names the grammar that runs it:
- `think`: reasoning. States BEFORE (content), REASONING, PENDING (an implicit end awaiting the text
  that confirms it) and AFTER (content). Terminals: `start` (BEFORE -> REASONING; AFTER -> REASONING
  when `reopen`), `end` (REASONING -> AFTER), `implicit_end`, a tool-call start that ends reasoning
  and stays in the content for the tool parser (REASONING -> AFTER, through PENDING when `confirm` is
  set: the text after it, whitespace skipped, must match). The start state: REASONING when
  `starts_in_reasoning` (the template opens the start terminal in the prompt), else BEFORE; a request's
  thinking switch or prompt overrides it. Engine: `detok.parsing.reasoning.think.ThinkParser`.
- `json_region`: tool calls as one JSON object `{"name": ..., "arguments": {...}}` between `start`
  and `end`. Engine: `detok.parsing.tools.hermes.HermesToolParser`.
- `xml_parameters`: `start` `<function=NAME>` `<parameter=P>`value`</parameter>` `</function>` `end`,
  values typed by the request's schema. Engine: `detok.parsing.tools.qwen3_coder.Qwen3CoderToolParser`.
- `invoke_parameters`: `start` `<PREFIXinvoke name="NAME">` `<PREFIXparameter name="P">`value
  `</PREFIXparameter>` `</PREFIXinvoke>` `end` (`tag_prefix` PREFIX: DSML's `｜DSML｜`), values typed by
  a `string` attribute or the request's schema. Engine:
  `detok.parsing.tools.invoke_parameters.InvokeParametersToolParser`.
- `pythonic`: a Python list of calls with literal keyword arguments, the whole output, maybe between
  `start` and `end` (empty: none). Engine: `detok.parsing.tools.pythonic.PythonicToolParser`.
- `keyed_call`: `start` `call:NAME{key:value,...}` `end`, values in a key:value literal syntax whose
  strings sit between the `delimiter` terminal (Gemma 4's `<|"|>`), decoded to JSON by
  `detok.parsing.tools.keyed_values`. Engine: `detok.parsing.tools.keyed_call.KeyedCallToolParser`.

A `think` table may also name a `reasoning_prefix`: text the model writes at the start of its
reasoning that is not reasoning (Gemma 4's channel name, `thought\n`), dropped; and set
`thinking_switch` False where `chat_template_kwargs`' thinking switch does not open reasoning in the
prompt (Gemma 4 writes its own start terminal).

Every terminal is matched by token id where it is one token of the vocabulary (never split) and in
the text otherwise, so a table keeps the engines' compiled path, any-grouping exactness and replay.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from detok.parsing.base import ReasoningParser, ToolParser

Grammar = Literal["think", "json_region", "xml_parameters", "invoke_parameters", "pythonic", "keyed_call"]


@dataclasses.dataclass(frozen=True)
class FamilyTable:
    grammar: Grammar
    names: tuple[str, ...]  # vLLM's name first, then aliases
    start: str
    end: str
    doc: str  # the model family and where its format is documented
    starts_in_reasoning: bool = False  # think: the default start state
    implicit_end: str | None = None  # think: a tool-call start that ends reasoning
    confirm: tuple[str, ...] = ()  # think: texts one of which confirms the implicit end
    reopen: bool = False  # think: a start terminal in the answer opens reasoning again
    required_tokens: tuple[str, ...] = ()  # terminals that must be single tokens of the vocabulary
    tag_prefix: str = ""  # invoke_parameters: after each `<` / `</` of the invoke and parameter tags
    # think: tool-call starts that replace `implicit_end` when the request's tool parser has one
    tool_implicit_ends: tuple[str, ...] = ()
    reasoning_prefix: str = ""  # think: dropped at the start of the (first) reasoning
    thinking_switch: bool = True  # think: the thinking kwargs say where the output starts
    delimiter: str = ""  # keyed_call: the terminal around a string value
    # invoke_parameters: the invoke and parameter tags when not `tag_prefix`'s (function, its end,
    # parameter, its end), and whether their attributes are XTML's (Kimi K3)
    tags: tuple[str, ...] = ()
    xtml: bool = False
    # think, invoke_parameters: terminals that wrap the answer, dropped from the content
    content_drops: tuple[str, ...] = ()
    keeps_special_tokens: bool = False  # think: the family's requests do not skip special tokens


def _think(table: FamilyTable) -> type[ReasoningParser]:
    from detok.parsing.reasoning.think import ThinkParser

    attrs: dict[str, object] = {
        "names": table.names, "start": table.start, "end": table.end,
        "markers": (table.start, table.end) + ((table.implicit_end,) if table.implicit_end else ()),
        "default_starts_in_reasoning": table.starts_in_reasoning, "implicit_end": table.implicit_end,
        "reopen": table.reopen, "required_tokens": table.required_tokens,
        "tool_implicit_ends": table.tool_implicit_ends, "thinking_switch": table.thinking_switch,
        "keeps_special_tokens": table.keeps_special_tokens,
    }
    if table.content_drops:
        from detok.parsing.reasoning.content_drops import ContentDroppingThinkParser

        attrs["content_drops"] = table.content_drops
        return type(_class_name(table), (ContentDroppingThinkParser,), attrs)
    if table.reasoning_prefix:
        from detok.parsing.reasoning.prefix import PrefixDroppingThinkParser

        attrs["reasoning_prefix"] = table.reasoning_prefix
        return type(_class_name(table), (PrefixDroppingThinkParser,), attrs)
    if table.confirm:
        attrs["implicit_confirm"] = re.compile("|".join(map(re.escape, table.confirm)))
        attrs["implicit_confirm_prefixes"] = table.confirm
    return type(_class_name(table), (ThinkParser,), attrs)


def _tools(table: FamilyTable) -> type[ToolParser]:
    from detok.parsing.tools.hermes import HermesToolParser
    from detok.parsing.tools.invoke_parameters import InvokeParametersToolParser, tags
    from detok.parsing.tools.keyed_call import KeyedCallToolParser
    from detok.parsing.tools.pythonic import PythonicToolParser
    from detok.parsing.tools.qwen3_coder import Qwen3CoderToolParser

    engines: dict[str, type[ToolParser]] = {"json_region": HermesToolParser, "xml_parameters": Qwen3CoderToolParser,
                                             "invoke_parameters": InvokeParametersToolParser,
                                             "pythonic": PythonicToolParser, "keyed_call": KeyedCallToolParser}
    engine = engines[table.grammar]
    attrs: dict[str, object] = {"names": table.names, "start": table.start, "end": table.end,
                                "required_tokens": table.required_tokens}
    if table.grammar == "keyed_call":
        attrs["delimiter"] = table.delimiter
        own = (table.delimiter,)
    elif table.grammar == "invoke_parameters":
        own: tuple[str, ...] = table.tags or tags(table.tag_prefix)
        attrs.update(zip(("function", "function_end", "parameter", "parameter_end"), own))
        attrs.update(xtml=table.xtml, content_drops=table.content_drops)
        own += table.content_drops
    else:  # the engine's own terminals, with the region's tags replaced (an empty tag: none)
        own = tuple(m for m in engine.markers if m not in (engine.start, engine.end))  # type: ignore[attr-defined]
    attrs["markers"] = tuple(m for m in (table.start, table.end) if m) + own
    return type(_class_name(table), (engine,), attrs)


def _class_name(table: FamilyTable) -> str:
    kind = "Reasoning" if table.grammar == "think" else "Tool"
    return "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", table.names[0])) + kind + "Parser"


def family_class(table: FamilyTable) -> type[ReasoningParser] | type[ToolParser]:
    """The parser class that runs `table` on its grammar's engine."""
    return _think(table) if table.grammar == "think" else _tools(table)
