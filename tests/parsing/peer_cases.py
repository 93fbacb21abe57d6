"""The peers' cases, the one source of them: tests/parsing/cases/<family>.json.

A file holds one family's cases (the reasoning family's, its tool family's and the two composed) and
`vocabularies`, names in tests/parsing/vocabularies.py: the family's own vocabulary first (the worker
and replay tests run there), then the others its cases also hold on (markers as text, an older
vocabulary of the family). Optional keys: a file's `call_id_pattern` (the ids the family makes), a
case's `vocabularies` (fewer than its file's where its parsers require markers as tokens that the
others lack: the worker refuses such a request), `starts_in_reasoning` (None: the family's default),
`tools` (a schema that types its values, else `DEFAULT_TOOLS`) and `call_ids` (ids the model wrote).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from detok.parsing.types import OutputParsing, ToolSpec
from detok.tokenizer.base import Tokenizer
from tests.parsing import vocabularies

CASES_DIR = Path(__file__).parent / "cases"
DEFAULT_TOOLS = (ToolSpec("get_weather", {"type": "object", "properties": {"location": {"type": "string"},
                                                                           "unit": {"type": "string"}}}),)


@dataclass(frozen=True)
class PeerCase:
    family: str  # the case file's
    id: str
    source: str
    reasoning_parser: str | None
    tool_parser: str | None
    starts_in_reasoning: bool | None
    tools: tuple[ToolSpec, ...]
    output: str
    reasoning: str
    content: str
    calls: tuple[tuple[str, object], ...]  # (name, arguments as a JSON value, or text where not JSON)
    call_ids: tuple[str, ...] | None
    call_id_pattern: str | None
    vocabularies: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.family}-{self.id}"

    def parsing(self, seed: str = "s") -> OutputParsing:
        return OutputParsing(self.reasoning_parser, self.tool_parser, self.tools, self.starts_in_reasoning,
                             call_id_seed=seed)

    def want(self) -> tuple[str, str, list[tuple[str, object]]]:
        return self.reasoning, self.content, list(self.calls)


def vocabulary(name: str) -> Tokenizer:
    get: Callable[[], Tokenizer] = getattr(vocabularies, name)
    return get()


def _case(family: str, data: dict, c: dict) -> PeerCase:
    tools: tuple[ToolSpec, ...] = ()
    if c["tool_parser"]:
        tools = tuple(ToolSpec(t["name"], t["parameters"]) for t in c["tools"]) if "tools" in c else DEFAULT_TOOLS
    return PeerCase(family, c["id"], c["source"], c["reasoning_parser"], c["tool_parser"], c.get("starts_in_reasoning"),
                    tools, c["output"], c["reasoning"], c["content"], tuple((n, a) for n, a in c["calls"]),
                    tuple(c["call_ids"]) if "call_ids" in c else None, data.get("call_id_pattern"),
                    tuple(c.get("vocabularies", data["vocabularies"])))


@functools.cache
def load() -> tuple[PeerCase, ...]:
    out: list[PeerCase] = []
    for path in sorted(CASES_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        out += [_case(data["family"], data, c) for c in data["cases"]]
    return tuple(out)


def of(*families: str) -> list[PeerCase]:
    return [c for c in load() if c.family in families]
