"""Reasoning parser families: a module each, or a table (`detok.parsing.family_tables`). `FAMILIES`
lists them for the registry."""

from __future__ import annotations

from detok.parsing.base import ReasoningParser
from detok.parsing.family_table import family_class
from detok.parsing.family_tables import REASONING_TABLES
from detok.parsing.reasoning.deepseek_r1 import DeepSeekR1Parser
from detok.parsing.reasoning.glm45 import Glm45Parser
from detok.parsing.reasoning.kimi_k2 import KimiK2Parser
from detok.parsing.reasoning.mistral import MistralParser
from detok.parsing.reasoning.openai_gptoss import GptOssParser
from detok.parsing.reasoning.qwen3 import Qwen3Parser

FAMILIES: list[type[ReasoningParser]] = [DeepSeekR1Parser, Qwen3Parser, Glm45Parser, KimiK2Parser, MistralParser, GptOssParser]
FAMILIES += [family_class(t) for t in REASONING_TABLES]  # type: ignore[misc]
