"""bench/typed_worker.py: each row's prefix puts its body in the row's section (the body's text goes
out as that section and nothing else), and the bench runs and prints one JSON line (tiny sizes; no
timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.parsers import pieces_of, token_id_of
from bench.typed_worker import CONFIGS, TOOLS, Row, body_text
from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing

REPO = Path(__file__).resolve().parents[2]
# arguments held to the call's end (decoded once, as the family's peers do): nothing goes out while fed
HELD_ARGUMENTS = frozenset({"gemma4", "pythonic", "llama4_pythonic"})


@pytest.mark.parametrize("row", CONFIGS, ids=[f"{c.name}-{c.section}" for c in CONFIGS])
def test_row_prefix_puts_body_in_its_section(row: Row) -> None:
    from tests.helpers.tokenizers_available import corpus_text
    from tests.parsing import vocabularies

    tok = getattr(vocabularies, row.vocab)()
    parsing = OutputParsing(row.reasoning, row.tools, TOOLS if row.tools else (), row.starts_in_reasoning)
    parser = OutputParser(parsing, token_id_of(tok))
    for piece in pieces_of(tok, tok.encode(row.prefix), parser.marker_ids):
        parser.feed(piece)
    body = tok.encode(body_text(row, corpus_text().replace("<", "(")[:400]))[:48]
    out = {"reasoning": 0, "content": 0, "arguments": 0}
    for piece in pieces_of(tok, body, parser.marker_ids):
        delta = parser.feed(piece)
        out["reasoning"] += len(delta.reasoning)
        out["content"] += len(delta.content)
        out["arguments"] += sum(len(c.arguments) for c in delta.tool_calls)
    held = row.section == "arguments" and row.tools in HELD_ARGUMENTS
    assert out[row.section] == 0 if held else out[row.section] > 0, out
    assert all(n == 0 for section, n in out.items() if section != row.section), out


def test_typed_worker_bench_json_line() -> None:
    out = subprocess.run([sys.executable, "-m", "bench.typed_worker", "--rows", "gemma4", "--requests", "2",
                          "--tokens", "8", "--repeats", "1", "--json", "--no-progress"],
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    rows = json.loads(lines[0])["rows"]
    assert [(r["parser"], r["section"]) for r in rows] == [
        ("gemma4+gemma4", "reasoning"), ("gemma4+gemma4", "content"), ("gemma4+gemma4", "arguments")]
    for r in rows:
        assert r["tokens"] == 16 and r["plain_ns"] > 0 and r["typed_ns"] > 0
