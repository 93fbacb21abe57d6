"""Worker CPU per token of the output parsers: CPU ns (process time) per token fed to `OutputParser.feed`, one token's
text per call (a scheduler sending one id per step, the worst case), on reasoning text, on content
text after it, on tool-call arguments (every tool family: a JSON string argument, or the XML
formats' string value), and on content of a request with tools; against the loop alone (no parser: the worker's path
without parsing makes no call at all). Side by side in one run, repetitions interleaved, median taken.

    python -m bench.parsers [--tokens 20000] [--repeat 5] [--json]

Vocabularies as the tests use them (tests/parsing/vocabularies.py: Qwen3.6 with `<think>` tokens, GPT-2
with every marker as plain text, Tekken with `[THINK]`, cl100k with Harmony's tokens); the text is the
test corpus (Botchan), tokenized by each vocabulary. Needs the `test` extra's tokenizer packages.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/parsers.py`
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing, Piece
from detok.tokenizer.base import Tokenizer

# (row name, vocabulary, reasoning parser, tool parser, opening text, closing text of the section timed)
CONFIGS: list[tuple[str, str, str | None, str | None, str, str]] = [
    ("qwen3", "qwen", "qwen3", None, "<think>", "</think>"),
    ("deepseek_r1", "deepseek", "deepseek_r1", None, "<think>", "</think>"),
    ("glm45", "qwen", "glm45", None, "<think>", "</think>"),
    ("kimi_k2", "qwen_kimi", "kimi_k2", None, "<think>", "</think>"),
    ("mistral", "mistral", "mistral", None, "[THINK]", "[/THINK]"),
    ("qwen3 (markers as text)", "gpt2", "qwen3", None, "<think>", "</think>"),
    ("deepseek_r1 (markers as text)", "gpt2", "deepseek_r1", None, "<think>", "</think>"),
    # the table families (detok.parsing.family_tables)
    ("seed_oss", "qwen_seed", "seed_oss", None, "<seed:think>", "</seed:think>"),
    ("nemotron_v3", "qwen", "nemotron_v3", None, "<think>", "</think>"),
    ("olmo3", "qwen", "olmo3", None, "<think>", "</think>"),
    ("minimax_m2", "qwen", "minimax_m2", None, "<think>", "</think>"),
    ("deepseek_v3", "deepseek", "deepseek_v3", None, "<think>", "</think>"),
    ("gemma4", "qwen_gemma4", "gemma4", None, "<|channel>thought\n", "<channel|>"),
    ("step3p5", "qwen", "step3p5", None, "<think>", "</think>"),
    ("kimi_k3", "qwen_k3", "kimi_k3", None, "<|open|>think<|sep|>", "<|close|>think<|sep|><|open|>response<|sep|>"),
    ("openai_gptoss", "harmony", "openai_gptoss", None, "<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"),
    ("openai_gptoss+openai", "harmony", "openai_gptoss", "openai", "<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"),
]
# tool arguments: (row, vocabulary, reasoning, tools, text before the arguments)
TOOL_CONFIGS = [
    ("openai (arguments)", "harmony", "openai_gptoss", "openai", "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"),
    ("hermes (arguments)", "qwen", None, "hermes", '<tool_call>\n{"name": "f", "arguments": '),
    ("qwen3_coder (string value)", "qwen", None, "qwen3_coder", "<tool_call>\n<function=f>\n<parameter=text>\n"),
    ("llama3_json (arguments)", "qwen", None, "llama3_json", '{"name": "f", "parameters": '),
    ("mistral (arguments)", "mistral", None, "mistral", "[TOOL_CALLS]f[ARGS]"),
    ("deepseek_v3 (arguments)", "deepseek", None, "deepseek_v3",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"),
    ("deepseek_v31 (arguments)", "deepseek", None, "deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>"),
    ("kimi_k2 (arguments)", "qwen_kimi", None, "kimi_k2",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"),
    ("glm45 (string value)", "qwen", None, "glm45", "<tool_call>f\n<arg_key>text</arg_key>\n<arg_value>"),
    ("qwen3_xml (string value)", "qwen", None, "qwen3_xml", "<tool_call>\n<function=f>\n<parameter=text>\n"),
    ("seed_oss (string value)", "qwen_seed", None, "seed_oss", "<seed:tool_call>\n<function=f>\n<parameter=text>\n"),
    ("qwen3_json (arguments)", "qwen", None, "qwen3_json", '<tool_call>\n{"name": "f", "arguments": '),
    ("granite4 (arguments)", "qwen", None, "granite4", '<tool_call>\n{"name": "f", "arguments": '),
    # (held to the call's end and decoded once: every feed goes through the family's state machine;
    # the worker keeps such ids off the parser, on its compiled path: bench.typed_worker)
    ("gemma4 (string value)", "qwen_gemma4", None, "gemma4", '<|tool_call>call:f{text:<|"|>'),
    ("step3p5 (string value)", "qwen", None, "step3p5", "<tool_call>\n<function=f>\n<parameter=text>\n"),
    ("kimi_k3 (string value)", "qwen_k3", None, "kimi_k3",
     '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="text" type="string"<|sep|>'),
    ("hermes (arguments, markers as text)", "gpt2", None, "hermes", '<tool_call>\n{"name": "f", "arguments": '),
]
# content of a request with tools, no call in it: (row, vocabulary, tool parser)
CONTENT_CONFIGS = [
    ("hermes (content)", "qwen", "hermes"),
    ("qwen3_coder (content)", "qwen", "qwen3_coder"),
    ("llama3_json (content)", "qwen", "llama3_json"),
    ("mistral (content)", "mistral", "mistral"),
    ("deepseek_v31 (content)", "deepseek", "deepseek_v31"),
    ("kimi_k2 (content)", "qwen_kimi", "kimi_k2"),
    ("glm45 (content)", "qwen", "glm45"),
    ("seed_oss (content)", "qwen_seed", "seed_oss"),
    ("qwen3_json (content)", "qwen", "qwen3_json"),
    ("pythonic (content)", "qwen", "pythonic"),
    ("llama4_pythonic (content)", "qwen_llama4", "llama4_pythonic"),
    ("gemma4 (content)", "qwen_gemma4", "gemma4"),
    ("kimi_k3 (content)", "qwen_k3", "kimi_k3"),
    ("step3p5 (content)", "qwen", "step3p5"),
]


def vocabulary(name: str) -> Tokenizer:
    from tests.parsing import vocabularies

    return getattr(vocabularies, name)()


def corpus() -> str:
    from tests.helpers.tokenizers_available import corpus_text

    return corpus_text()


def first_ids(tok: Tokenizer, text: str, n: int) -> list[int]:
    """The first `n` ids of `text`'s encoding, encoding only a prefix (the whole corpus for every
    row would be most of a short run's time): one long enough for `n` ids and a margin, so the
    cut falls past them."""
    size = 8 * n + 1024
    while True:
        ids = tok.encode(text[:size])
        if len(ids) >= n + 64 or size >= len(text):
            return ids[:n]
        size *= 2


def token_id_of(tok: Tokenizer) -> Callable[[str], int | None]:
    def token_id(text: str) -> int | None:
        tid = tok.token_to_id(text)
        return tid if tid is not None and tok.encode(text) == [tid] else None

    return token_id


def pieces_of(tok: Tokenizer, ids: list[int], markers: dict[int, str]) -> list[Piece]:
    """One piece per id: a marker piece for a marker id, else the id's new text (a short window
    decode; a character split over ids waits for its last one)."""
    out: list[Piece] = []
    start = 0
    for k, i in enumerate(ids):
        if i in markers:
            out.append(Piece(markers[i], markers[i]))
            start = k + 1
            continue
        lo = max(start, k - 4)
        before = tok.decode(ids[lo:k], skip_special_tokens=False)
        now = tok.decode(ids[lo : k + 1], skip_special_tokens=False)
        if now.endswith("\ufffd") or not now.startswith(before):
            out.append(Piece(""))
            continue
        out.append(Piece(now[len(before) :]))
    return out


def _time(fn: Callable[[], None]) -> float:
    gc.collect()
    gc.freeze()  # the vocabularies loaded so far: the next row's collection walks only what is new
    gc.disable()
    try:
        t0 = time.process_time_ns()  # this process's CPU: a loaded machine does not inflate it
        fn()
        return float(time.process_time_ns() - t0)
    finally:
        gc.enable()


def measure(
    tok: Tokenizer, rp: str | None, tp: str | None, prefix: str, body: str, tail: str, repeat: int
) -> dict[str, float]:
    """ns/token on `body` fed after `prefix` (reasoning or arguments), and on `body` fed after
    `prefix + body + tail` (content), plus the loop alone."""
    parsing = OutputParsing(reasoning_parser=rp, tool_parser=tp, call_id_seed="bench")
    probe = OutputParser(parsing, token_id_of(tok))
    markers = probe.marker_ids
    pre = pieces_of(tok, tok.encode(prefix), markers)
    mid = pieces_of(tok, tok.encode(body), markers)
    post = pieces_of(tok, tok.encode(tail), markers) if tail else []
    n = len(mid)

    def loop_only() -> None:
        for p in mid:
            pass

    def section(after: list[Piece]) -> Callable[[], None]:
        op = OutputParser(parsing, token_id_of(tok))
        for p in after:
            op.feed(p)
        feed = op.feed

        def run() -> None:
            for p in mid:
                feed(p)

        return run

    samples: dict[str, list[float]] = {"loop": [], "first": [], "after": []}
    for _ in range(repeat):
        samples["loop"].append(_time(loop_only) / n)
        samples["first"].append(_time(section(pre)) / n)
        if tail:
            samples["after"].append(_time(section(pre + mid + post)) / n)
    return {k: statistics.median(v) for k, v in samples.items() if v} | {"tokens": float(n)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=20000, help="about this many tokens per section")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="one JSON line")
    args = ap.parse_args(argv)
    text = corpus()
    rows: list[dict[str, Any]] = []
    todo = [(c, False) for c in CONFIGS] + [(c, True) for c in TOOL_CONFIGS] + [(c, None) for c in CONTENT_CONFIGS]
    for i, (cfg, is_tool) in enumerate(todo, 1):
        name, vocab = cfg[0], cfg[1]
        print(f"[{i}/{len(todo)}] {name}", file=sys.stderr, flush=True)
        try:
            tok = vocabulary(vocab)
        except BaseException as e:  # noqa: BLE001 - a missing test package (pytest.skip) skips a row
            rows.append({"parser": name, "skipped": f"{type(e).__name__}: {e}"})
            continue
        ids = first_ids(tok, text, args.tokens)
        body = tok.decode(ids).replace("<", "(")  # plain text: no marker, no marker prefix by accident
        if is_tool is None:  # a tool parser on content without a call
            r = measure(tok, None, cfg[2], "", body, "", args.repeat)
            rows.append({"parser": name, "vocabulary": vocab, "tokens": int(r["tokens"]), "loop_ns": r["loop"],
                         "content_ns": r["first"], "content_over_loop_ns": r["first"] - r["loop"]})
            continue
        if is_tool:
            body = json.dumps({"text": body})
            r = measure(tok, cfg[2], cfg[3], cfg[4], body, "", args.repeat)
            rows.append({"parser": name, "vocabulary": vocab, "tokens": int(r["tokens"]), "loop_ns": r["loop"],
                         "arguments_ns": r["first"], "arguments_over_loop_ns": r["first"] - r["loop"]})
            continue
        r = measure(tok, cfg[2], cfg[3], cfg[4], body, cfg[5], args.repeat)
        rows.append({"parser": name, "vocabulary": vocab, "tokens": int(r["tokens"]), "loop_ns": r["loop"],
                     "reasoning_ns": r["first"], "content_ns": r["after"],
                     "reasoning_over_loop_ns": r["first"] - r["loop"], "content_over_loop_ns": r["after"] - r["loop"]})
    if args.json:
        print(json.dumps({"bench": "parsers", "unit": "ns/token", "rows": rows}))
        return 0
    print(f"{'parser':34} {'vocab':10} {'tokens':>7} {'loop':>6} {'reasoning':>10} {'content':>8} {'args':>7}  (ns/token)")
    for r in rows:
        if "skipped" in r:
            print(f"{r['parser']:34} skipped: {r['skipped']}")
            continue
        print(
            f"{r['parser']:34} {r['vocabulary']:10} {r['tokens']:>7} {r['loop_ns']:>6.0f} "
            f"{r.get('reasoning_ns', float('nan')):>10.0f} {r.get('content_ns', float('nan')):>8.0f} "
            f"{r.get('arguments_ns', float('nan')):>7.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
