"""Tool-call parser families: each a row of `detok.parsing.family_tables`, run by its grammar's engine
(a module here named by the grammar: `json_region`, `xml_parameters`, `invoke_parameters`,
`key_value_tags`, `section_calls`, `json_objects`, `marker_calls`, `harmony_calls`, `pythonic`), with
the shared machinery (`core`, `call_object`, `json_stream`, `json_values`, `schema_values`,
`value_holds`). `FAMILIES` lists them for the registry."""

from __future__ import annotations

from detok.parsing.base import ToolParser
from detok.parsing.family_table import family_class
from detok.parsing.family_tables import TOOL_TABLES

FAMILIES: list[type[ToolParser]] = [family_class(t) for t in TOOL_TABLES]  # type: ignore[misc]
_BY_NAME = {f.names[0]: f for f in FAMILIES}
# the classes by the names their users import
HermesToolParser = _BY_NAME["hermes"]
Qwen3CoderToolParser = _BY_NAME["qwen3_coder"]
Glm45ToolParser = _BY_NAME["glm45"]
DeepSeekV3ToolParser = _BY_NAME["deepseek_v3"]
DeepSeekV31ToolParser = _BY_NAME["deepseek_v31"]
KimiK2ToolParser = _BY_NAME["kimi_k2"]
Llama3JsonToolParser = _BY_NAME["llama3_json"]
MistralToolParser = _BY_NAME["mistral"]
