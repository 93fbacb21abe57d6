"""bench/tool_parsers.py runs and reports every family; its peer-style baseline gives hermes's results
on the bench's calls (a side-by-side comparison holds only on equal output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.tool_parsers import FIXTURES, FORMATS, call_text, pieces_of
from bench.tool_parsers_peer import ReparseHermes
from detok.parsing.output import call_id_maker
from detok.parsing.tools import FAMILIES
from detok.parsing.tools import HermesToolParser

REPO = Path(__file__).resolve().parents[2]


def test_smoke_prints_a_line_per_family_and_stream() -> None:
    cmd = [sys.executable, "-m", "bench.tool_parsers", "--json", "--repeat", "1", "--tokens", "200", "--no-progress"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    seen = {(r["parser"], r["stream"]) for r in records}
    assert {(name, s) for name in FORMATS for s in ("content", "calls")} <= seen
    assert set(FORMATS) <= {f.names[0] for f in FAMILIES}
    assert ("hermes_reparse_per_chunk", "calls_x8") in seen
    assert all(r["ns_per_token"] > 0 for r in records)


def test_peer_style_baseline_gives_hermes_results() -> None:
    from detok.tokenizer.factory import load_tokenizer

    tok = load_tokenizer(str(FIXTURES / "hf" / "qwen2"))
    pieces = pieces_of(tok, "Pre." + "".join(call_text("hermes", i) for i in range(3)), HermesToolParser.markers)

    def run(parser) -> tuple[str, dict, dict]:  # type: ignore[no-untyped-def]
        content, names, args = [], {}, {}
        for p in pieces:
            text, deltas = parser.feed(p)
            content.append(text)
            for d in deltas:
                if d.name:
                    names[d.index] = d.name
                args[d.index] = args.get(d.index, "") + d.arguments
        return "".join(content), names, args

    ours = run(HermesToolParser(tools=(), token_markers=frozenset(HermesToolParser.markers), call_id=call_id_maker("b")))
    assert ours == run(ReparseHermes())
    assert len(ours[1]) == 3
