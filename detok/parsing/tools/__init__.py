"""Tool-call parser families: a module each, or a table (`detok.parsing.family_tables`). `FAMILIES`
lists them for the registry."""

from __future__ import annotations

from detok.parsing.base import ToolParser
from detok.parsing.family_table import family_class
from detok.parsing.family_tables import CORE_TOOL_TABLES, TOOL_TABLES
from detok.parsing.tools.llama3_json import Llama3JsonToolParser
from detok.parsing.tools.mistral import MistralToolParser
from detok.parsing.tools.openai_harmony import OpenAIHarmonyToolParser

FAMILIES: list[type[ToolParser]] = [family_class(t) for t in CORE_TOOL_TABLES + TOOL_TABLES]  # type: ignore[misc]
FAMILIES += [Llama3JsonToolParser, MistralToolParser, OpenAIHarmonyToolParser]
_BY_NAME = {f.names[0]: f for f in FAMILIES}
# the classes by the names their users import
HermesToolParser = _BY_NAME["hermes"]
Qwen3CoderToolParser = _BY_NAME["qwen3_coder"]
Glm45ToolParser = _BY_NAME["glm45"]
DeepSeekV3ToolParser = _BY_NAME["deepseek_v3"]
DeepSeekV31ToolParser = _BY_NAME["deepseek_v31"]
KimiK2ToolParser = _BY_NAME["kimi_k2"]
