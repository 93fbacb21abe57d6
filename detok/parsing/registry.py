"""Parser names (vLLM's, with SGLang's as aliases) and the start-time check of a tokenizer's markers."""

from __future__ import annotations

from collections.abc import Callable

from detok.parsing.base import ReasoningParser, ToolParser


class ParserConfigError(ValueError):
    """A parser name that does not exist, or a tokenizer that lacks the family's marker tokens."""


# id(FAMILIES) -> (that list, its length then, name -> family)
_TABLES: dict[int, tuple[list, int, dict[str, type]]] = {}


def _by_name(families: list) -> dict[str, type]:
    """The table of a FAMILIES list, built once per list (every parsed request's registration looks
    its parsers up; tests put other lists in place, which get their own)."""
    cached = _TABLES.get(id(families))
    if cached is not None and cached[0] is families and cached[1] == len(families):
        return cached[2]
    table: dict[str, type] = {}
    for family in families:
        for name in family.names:
            table[name] = family
    if len(_TABLES) >= 16:
        _TABLES.clear()
    _TABLES[id(families)] = (families, len(families), table)
    return table


def reasoning_parsers() -> dict[str, type[ReasoningParser]]:
    from detok.parsing.reasoning import FAMILIES

    return _by_name(FAMILIES)


def tool_parsers() -> dict[str, type[ToolParser]]:
    from detok.parsing.tools import FAMILIES

    return _by_name(FAMILIES)


def reasoning_parser_class(name: str) -> type[ReasoningParser]:
    table = reasoning_parsers()
    if name not in table:
        raise ParserConfigError(
            f"unknown reasoning parser {name!r}; known: {', '.join(sorted(table)) or 'none'}"
        )
    return table[name]


def tool_parser_class(name: str) -> type[ToolParser]:
    table = tool_parsers()
    if name not in table:
        raise ParserConfigError(
            f"unknown tool-call parser {name!r}; known: {', '.join(sorted(table)) or 'none'}"
        )
    return table[name]


def marker_token_ids(
    family: type[ReasoningParser] | type[ToolParser], token_id: Callable[[str], int | None]
) -> dict[str, int]:
    """The family's markers that are single tokens of this tokenizer (`token_id(text)` gives the id of
    a text that is exactly one token, else None). Raises if a required marker is not one token."""
    found = {m: i for m in family.markers if (i := token_id(m)) is not None}
    missing = [m for m in family.required_tokens if m not in found]
    if missing:
        raise ParserConfigError(
            f"parser {family.names[0]!r} needs {', '.join(map(repr, missing))} as single tokens, "
            "and this tokenizer does not have them"
        )
    return found
