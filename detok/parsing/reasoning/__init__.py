"""Reasoning parser families, one module each. `FAMILIES` lists them for the registry."""

from __future__ import annotations

from detok.parsing.base import ReasoningParser

FAMILIES: list[type[ReasoningParser]] = []
