"""Tool-call parser families: a module each, or a table (`detok.parsing.family_tables`). `FAMILIES`
lists them for the registry."""

from __future__ import annotations

from detok.parsing.base import ToolParser
from detok.parsing.family_table import family_class
from detok.parsing.family_tables import TOOL_TABLES
from detok.parsing.tools.deepseek import DeepSeekV3ToolParser, DeepSeekV31ToolParser
from detok.parsing.tools.glm45 import Glm45ToolParser
from detok.parsing.tools.hermes import HermesToolParser
from detok.parsing.tools.kimi_k2 import KimiK2ToolParser
from detok.parsing.tools.llama3_json import Llama3JsonToolParser
from detok.parsing.tools.mistral import MistralToolParser
from detok.parsing.tools.openai_harmony import OpenAIHarmonyToolParser
from detok.parsing.tools.qwen3_coder import Qwen3CoderToolParser

FAMILIES: list[type[ToolParser]] = [HermesToolParser, Qwen3CoderToolParser, Llama3JsonToolParser, MistralToolParser,
    DeepSeekV3ToolParser, DeepSeekV31ToolParser, KimiK2ToolParser, Glm45ToolParser, OpenAIHarmonyToolParser]
FAMILIES += [family_class(t) for t in TOOL_TABLES]  # type: ignore[misc]
