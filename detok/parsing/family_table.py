"""Families as tables: every family is a `FamilyTable` (data: grammar, terminals, start state), made a
parser class by `family_class` on its grammar's engine, not a module of code. A new grammar kind (an
engine) is added only where a format cannot be stated as another grammar's terminals; each kind below
says why it is one.

A table names the grammar that runs it:
- `think`: reasoning. States BEFORE (content), REASONING, PENDING (an implicit end awaiting the text
  that confirms it) and AFTER (content). Terminals: `start` (BEFORE -> REASONING; AFTER -> REASONING
  when `reopen`), `end` (REASONING -> AFTER), `implicit_end`, a tool-call start that ends reasoning
  and stays in the content for the tool parser (REASONING -> AFTER, through PENDING when `confirm` is
  set: the text after it, whitespace skipped, must match). The start state: REASONING when
  `starts_in_reasoning` (the template opens the start terminal in the prompt), else BEFORE; a request's
  thinking switch or prompt overrides it. Engine: `detok.parsing.reasoning.think.ThinkParser`.
- `harmony`: gpt-oss's Harmony messages, whose head names the channel (analysis: reasoning; final and
  commentary: content) and the recipient (a function: a tool call). A grammar kind of its own because
  what a body is comes from the head's channel and recipient, read field by field, not from a start
  and an end terminal; its terminals are Harmony's fixed tokens (`detok.parsing.harmony`). Engine:
  `detok.parsing.reasoning.harmony_channels.HarmonyReasoningParser`.
- `harmony_calls`: Harmony's tool calls, a message whose head names a function recipient, its body the
  arguments. Engine: `detok.parsing.tools.harmony_calls.HarmonyCallsToolParser`.
- `json_region`: tool calls as one JSON object `{"name": ..., "arguments": {...}}` between `start`
  and `end` (`hermes`, `qwen3_json`, `granite4`). Engine: `detok.parsing.tools.json_region.JsonRegionToolParser`.
- `xml_parameters`: `start` `<function=NAME>` `<parameter=P>`value`</parameter>` `</function>` `end`,
  values typed by the request's schema (`qwen3_coder`, `qwen3_xml`, `seed_oss`). Engine:
  `detok.parsing.tools.xml_parameters.XmlParametersToolParser`.
- `invoke_parameters`: `start` `<PREFIXinvoke name="NAME">` `<PREFIXparameter name="P">`value
  `</PREFIXparameter>` `</PREFIXinvoke>` `end` (`tag_prefix` PREFIX: DSML's `｜DSML｜`), values typed by
  a `string` attribute or the request's schema. Engine:
  `detok.parsing.tools.invoke_parameters.InvokeParametersToolParser`.
- `key_value_tags`: `start` NAME (bare text up to a newline) then per argument `key` KEY `key_end`
  `value` VALUE `value_end`, then `end`; values typed by the request's schema, else JSON, else a
  Python literal, else a string. Its own kind because the name has no tag of its own and a value's
  type comes from three readings in turn. Engine:
  `detok.parsing.tools.key_value_tags.KeyValueTagsToolParser`.
- `section_calls`: a calls section `start`...`end` of calls `call_begin` HEAD `sep` ARGUMENTS
  `call_end`, all of them tokens; HEAD per `call_head`. Its own kind because the calls are delimited
  by tokens with a head before a separator, not by tags around a JSON object. Engines:
  `detok.parsing.tools.section_calls.SectionToolParser`, `NativeIdSectionToolParser` for a native
  call id.
- `json_objects`: bare JSON call objects `{"name": ..., "parameters"|"arguments": {...}}`, maybe after
  `start`, separated by `;` or whitespace. Its own kind because no terminal opens a call: any `{` of
  the content may, so text from each `{` is held until the object shows whether it is a call. Engine:
  `detok.parsing.tools.json_objects.JsonObjectsToolParser`.
- `marker_calls`: `start` then either a JSON array of call objects (Mistral tokenizers before v11) or
  per call NAME `args_tag` ARGUMENTS, maybe with `call_id_tag` ID before `args_tag` (v11 and later).
  Its own kind because one terminal opens two syntaxes, told apart by the text after it. Engine:
  `detok.parsing.tools.marker_calls.MarkerCallsToolParser`.
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

Grammar = Literal["think", "harmony", "harmony_calls", "json_region", "xml_parameters", "invoke_parameters", "pythonic",
                  "key_value_tags", "section_calls", "json_objects", "marker_calls", "keyed_call"]


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
    confirm_pattern: str = ""  # think: a regex for that confirmation, where a literal text is too narrow
    reopen: bool = False  # think: a start terminal in the answer opens reasoning again
    required_tokens: tuple[str, ...] = ()  # terminals that must be single tokens of the vocabulary
    tag_prefix: str = ""  # invoke_parameters: after each `<` / `</` of the invoke and parameter tags
    # a tool grammar's other terminals, by its engine's name for each, where a family's differ from the
    # engine's own (e.g. ("key", "<arg_key>") for key_value_tags)
    terminals: tuple[tuple[str, str], ...] = ()
    # section_calls: what comes before the separator - the name, a type then the name on its own line
    # (the arguments then in a fence), or the model's native call id holding the name
    call_head: Literal["name", "type_name", "native_id"] = "name"
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
        attrs["implicit_confirm"] = re.compile(table.confirm_pattern or "|".join(map(re.escape, table.confirm)))
        attrs["implicit_confirm_prefixes"] = table.confirm
    return type(_class_name(table), (ThinkParser,), attrs)


def _harmony(table: FamilyTable) -> type[ReasoningParser] | type[ToolParser]:
    from detok.parsing.reasoning.harmony_channels import HarmonyReasoningParser
    from detok.parsing.tools.harmony_calls import HarmonyCallsToolParser

    # the terminals are Harmony's own, fixed by the format (`detok.parsing.harmony.MARKERS`)
    engine = HarmonyReasoningParser if table.grammar == "harmony" else HarmonyCallsToolParser
    return type(_class_name(table), (engine,), {"names": table.names, "required_tokens": table.required_tokens})


def _engine(table: FamilyTable) -> type[ToolParser]:
    from detok.parsing.tools.invoke_parameters import InvokeParametersToolParser
    from detok.parsing.tools.json_objects import JsonObjectsToolParser
    from detok.parsing.tools.json_region import JsonRegionToolParser
    from detok.parsing.tools.key_value_tags import KeyValueTagsToolParser
    from detok.parsing.tools.keyed_call import KeyedCallToolParser
    from detok.parsing.tools.marker_calls import MarkerCallsToolParser
    from detok.parsing.tools.pythonic import PythonicToolParser
    from detok.parsing.tools.section_calls import NativeIdSectionToolParser, SectionToolParser
    from detok.parsing.tools.xml_parameters import XmlParametersToolParser

    if table.grammar == "section_calls":
        return NativeIdSectionToolParser if table.call_head == "native_id" else SectionToolParser
    engines: dict[str, type[ToolParser]] = {"json_region": JsonRegionToolParser, "xml_parameters": XmlParametersToolParser,
                                             "invoke_parameters": InvokeParametersToolParser,
                                             "pythonic": PythonicToolParser, "key_value_tags": KeyValueTagsToolParser,
                                             "json_objects": JsonObjectsToolParser, "marker_calls": MarkerCallsToolParser,
                                             "keyed_call": KeyedCallToolParser}
    return engines[table.grammar]


def _tools(table: FamilyTable) -> type[ToolParser]:
    from detok.parsing.tools.invoke_parameters import tags

    engine = _engine(table)
    attrs: dict[str, object] = {"names": table.names, "start": table.start, "end": table.end,
                                "required_tokens": table.required_tokens, **dict(table.terminals)}
    if table.grammar == "keyed_call":
        attrs["delimiter"] = table.delimiter
    if table.grammar == "invoke_parameters":
        attrs.update(zip(("function", "function_end", "parameter", "parameter_end"), table.tags or tags(table.tag_prefix)))
        attrs.update(xtml=table.xtml, content_drops=table.content_drops)
    if table.call_head == "type_name":
        attrs["_type_first"] = True
    # the markers: the region's tags (an empty tag: none), then the grammar's other terminals
    terminals = [attrs.get(name, getattr(engine, name)) for name in engine.terminal_names]  # type: ignore[attr-defined]
    attrs["markers"] = tuple(m for m in (table.start, table.end, *terminals, *table.content_drops) if m)
    return type(_class_name(table), (engine,), attrs)


def _class_name(table: FamilyTable) -> str:
    kind = "Reasoning" if table.grammar in ("think", "harmony") else "Tool"
    return "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", table.names[0])) + kind + "Parser"


def family_class(table: FamilyTable) -> type[ReasoningParser] | type[ToolParser]:
    """The parser class that runs `table` on its grammar's engine."""
    if table.grammar == "think":
        return _think(table)
    return _harmony(table) if table.grammar in ("harmony", "harmony_calls") else _tools(table)
