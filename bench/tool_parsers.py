"""CPU per token of each tool-call parser, as the worker runs it: one piece per token (the worst case,
a scheduler sending one id per step), markers as marker pieces.

Two streams per family, tokenized by the Qwen2 fixture's real BPE (the family's markers cut out as
marker pieces, as one-token markers are): `content` (prose, no call: what every answer of a request
with tools costs) and `calls` (a short preamble, then two calls whose arguments hold code and
numbers: argument streaming). A request without a parser does not run this code at all.
Last, hermes side by side with the peers' approach (`tool_parsers_peer.py`: the whole text parsed
again on every delta, as vLLM's hermes parser does in its frontend) on 2 and 8 such calls.

    python -m bench.tool_parsers [--json] [--repeat 7] [--tokens 4000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from bench._common import CORPUS, FIXTURES, add_common_args, progress, report
from bench.tool_parsers_peer import ReparseHermes
from detok.parsing.output import call_id_maker
from detok.parsing.tools import FAMILIES
from detok.parsing.types import Piece, ToolSpec

CODE = 'def fib(n: int) -> int:\n    """Fibonacci, slowly."""\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n'
TOOLS = (ToolSpec("write_file", {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}),)


def _args(i: int) -> dict:
    return {"path": f"src/fib_{i}.py", "content": CODE * 6, "mode": 420}


# the families written here (Harmony's `openai` is measured by bench/parsers.py)
FORMATS = ("hermes", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2", "glm45")


def call_text(family: str, i: int) -> str:
    """One call to write_file in the family's format."""
    args = _args(i)
    dumped = json.dumps(args)
    if family == "hermes":
        return f'<tool_call>\n{json.dumps({"name": "write_file", "arguments": args})}\n</tool_call>\n'
    if family == "qwen3_coder":
        body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function=write_file>\n{body}</function>\n</tool_call>\n"
    if family == "llama3_json":
        return json.dumps({"name": "write_file", "parameters": args}) + "; "
    if family == "mistral":
        return f"[TOOL_CALLS]write_file[ARGS]{dumped}"
    if family == "deepseek_v3":
        return f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n```json\n{dumped}\n```<｜tool▁call▁end｜>"
    if family == "deepseek_v31":
        return f"<｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{dumped}<｜tool▁call▁end｜>"
    if family == "kimi_k2":
        return f"<|tool_call_begin|>functions.write_file:{i}<|tool_call_argument_begin|>{dumped}<|tool_call_end|>"
    if family == "glm45":
        body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items())
        return f"<tool_call>write_file\n{body}</tool_call>\n"
    raise ValueError(family)


def calls_text(family: str) -> str:
    calls = call_text(family, 0) + call_text(family, 1)
    if family in ("deepseek_v3", "deepseek_v31"):
        calls = f"<｜tool▁calls▁begin｜>{calls}<｜tool▁calls▁end｜>"
    elif family == "kimi_k2":
        calls = f"<|tool_calls_section_begin|>{calls}<|tool_calls_section_end|>"
    return "I will write both files now.\n\n" + calls


def pieces_of(tok, text: str, markers: tuple[str, ...]) -> list[Piece]:  # type: ignore[no-untyped-def]
    """Markers as marker pieces, the text between them one piece per token of `tok`."""
    out: list[Piece] = []
    i = start = 0
    ordered = sorted(markers, key=len, reverse=True)

    def plain(segment: str) -> None:
        ids = tok.encode(segment)
        done = ""
        for k in range(1, len(ids) + 1):
            now = tok.decode(ids[:k])
            if now.endswith("\ufffd") and k < len(ids):
                continue
            out.append(Piece(now[len(done) :]))
            done = now

    while i < len(text):
        hit = next((m for m in ordered if text.startswith(m, i)), None)
        if hit is None:
            i += 1
            continue
        plain(text[start:i])
        out.append(Piece(hit, hit))
        i += len(hit)
        start = i
    plain(text[start:])
    return [p for p in out if p.text]


def time_feed(family: type, pieces: list[Piece], repeat: int) -> float:
    """Best CPU seconds of feeding every piece and finishing, over `repeat` runs (process time: the
    machine may be shared)."""
    call_id: Callable[[int], str] = call_id_maker("bench")
    markers = frozenset(getattr(family, "markers", ()))
    best = float("inf")
    for _ in range(repeat):
        parser = (family(tools=TOOLS, token_markers=markers, call_id=call_id) if family is not ReparseHermes
                  else ReparseHermes())
        feed = parser.feed
        t0 = time.process_time()
        for p in pieces:
            feed(p)
        parser.finish()
        best = min(best, time.process_time() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=4000, help="tokens of the content stream")
    args = ap.parse_args(argv)
    from detok.tokenizer.factory import load_tokenizer

    tok = load_tokenizer(str(FIXTURES / "hf" / "qwen2"))
    prose = CORPUS.read_text(encoding="utf-8")
    content_ids = tok.encode(prose)[: args.tokens]
    content = [Piece(tok.decode(content_ids[i : i + 1])) for i in range(len(content_ids))]
    families = [f for f in FAMILIES if f.names[0] in FORMATS]
    bar = progress(len(families) * 2, "tool parsers", args.no_progress)
    for family in families:
        name = family.names[0]
        calls = pieces_of(tok, calls_text(name), family.markers)
        for stream, pieces in (("content", content), ("calls", calls)):
            seconds = time_feed(family, pieces, args.repeat)
            report(args.json, {"parser": name, "stream": stream, "tokens": len(pieces),
                               "ns_per_token": round(seconds / len(pieces) * 1e9)})
            bar.update()
    # the peers' approach on the same hermes calls, longer outputs too (its cost grows with the text)
    from detok.parsing.tools import HermesToolParser

    for n_calls in (2, 8):
        text = "I will write the files now.\n\n" + "".join(call_text("hermes", i) for i in range(n_calls))
        pieces = pieces_of(tok, text, HermesToolParser.markers)
        for label, family in (("hermes", HermesToolParser), ("hermes_reparse_per_chunk", ReparseHermes)):
            seconds = time_feed(family, pieces, args.repeat)
            report(args.json, {"parser": label, "stream": f"calls_x{n_calls}", "tokens": len(pieces),
                               "ns_per_token": round(seconds / len(pieces) * 1e9)})
    bar.close()


if __name__ == "__main__":
    main()
