"""Typing the text values of the XML formats (qwen3_coder, glm45) by the request's tool schema.

The rules are vLLM's (qwen3coder_tool_parser `_convert_param_value`): a parameter not in the schema,
or typed string (or `anyOf` whose first non-null type is string), stays a string; integer, number and
boolean types are converted (falling back to the string when the text is not one); object and array
values are read as JSON, then as a Python literal; "null"/"None" become null for non-string types
and for nullable strings. A value that cannot be JSON (NaN, a set) stays a string.
"""

from __future__ import annotations

import json
from typing import Any

from detok.parsing.tools import json_values

_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")


def properties(parameters: dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(parameters, dict):
        return {}
    props = parameters.get("properties")
    return props if isinstance(props, dict) else {}


def param_type(props: dict[str, Any], name: str) -> tuple[str, bool]:
    """(lower-case type name, whether null is allowed); ("", False) for a name not in the schema."""
    spec = props.get(name)
    if spec is None:
        return "", False
    if isinstance(spec, dict) and "type" in spec:
        kind = str(spec["type"]).strip().lower()
        return kind, kind == "null"
    if isinstance(spec, dict) and "anyOf" in spec:
        kind, nullable, picked = "string", False, False
        for option in spec["anyOf"] if isinstance(spec["anyOf"], list) else ():
            if isinstance(option, dict) and "type" in option:
                t = str(option["type"]).strip().lower()
                if t == "null":
                    nullable = True
                elif not picked:
                    kind, picked = t, True
        return kind, nullable
    return "string", False


def streams_as_string(kind: str, nullable: bool) -> bool:
    """Whether the value's text can be streamed as a JSON string while it arrives."""
    return (kind == "" or kind in _STRING_TYPES) and not nullable


def convert(text: str, kind: str, nullable: bool) -> Any:
    if kind == "":
        return text
    if nullable and text.lower() in ("null", "none"):
        return None
    if kind in _STRING_TYPES:
        return text
    if text.lower() in ("null", "none"):
        return None
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(text)
        except ValueError:
            return text
    if kind.startswith(("num", "float")):
        try:
            number = float(text)
            return int(number) if number == int(number) else number
        except (ValueError, OverflowError):
            return text
    if kind in ("boolean", "bool", "binary"):
        return text.lower() == "true"
    container = kind in ("object", "array", "arr") or kind.startswith(("dict", "list"))
    if container:
        try:
            value = json_values.loads(text)
            if isinstance(value, str):
                try:
                    value = json_values.literal(value)
                except ValueError:
                    pass
            return value
        except ValueError:
            pass
    try:
        value = json_values.literal(text)
        if container and isinstance(value, str):
            try:
                value = json_values.literal(value)
            except ValueError:
                pass
        return value
    except ValueError:
        return text


def value_json(text: str, kind: str, nullable: bool) -> str:
    """The JSON text of a finished value (the string itself when the converted value is not JSON)."""
    value = convert(text, kind, nullable)
    try:
        return json_values.dumps(value)
    except ValueError:
        return json.dumps(text, ensure_ascii=False)


def json_string_body(text: str) -> str:
    """`text` escaped as inside a JSON string (no quotes); escaping is per character, so pieces
    escaped apart join to the whole escaped."""
    if '"' not in text and "\\" not in text and text.isprintable():
        return text  # nothing to escape (the common case)
    return json.dumps(text, ensure_ascii=False)[1:-1]
