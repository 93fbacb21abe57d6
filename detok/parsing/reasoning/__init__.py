"""Reasoning parser families: each a row of `detok.parsing.family_tables`, run by its grammar's engine
(`think`: `think.ThinkParser`; `harmony`: `harmony_channels.HarmonyReasoningParser`). `FAMILIES`
lists them for the registry."""

from __future__ import annotations

from detok.parsing.base import ReasoningParser
from detok.parsing.family_table import family_class
from detok.parsing.family_tables import REASONING_TABLES

FAMILIES: list[type[ReasoningParser]] = [family_class(t) for t in REASONING_TABLES]  # type: ignore[misc]
_BY_NAME = {f.names[0]: f for f in FAMILIES}
# the classes by the names their users import
Qwen3Parser = _BY_NAME["qwen3"]
