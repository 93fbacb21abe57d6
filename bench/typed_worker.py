"""Typed output in the worker (reasoning, content, tool calls): worker CPU per token of parsed requests,
by where the token is (reasoning, content, a string argument), against the same ids as plain
requests, side by side in one run:

- `plain`: no parsing (the worker's compiled path);
- `typed`: parsed, with the compiled path for steady states (detok.stream.typed_fast);
- `typed_no_fast_path`: parsed, every id through the request's parser (the path before it).

    python -m bench.typed_worker [--requests 32] [--tokens 256] [--repeats 5] [--rows TEXT] [--json]

A row is a family pair and a section; `--rows` keeps the rows whose name holds TEXT. Each request's
prefix (the markers that put it in the section) goes in one untimed step; then one id per request per
step for `--tokens` ids of the test corpus (Botchan; `<` written as `(`; in the argument rows as a JSON
or Python string's text, or raw in XML-like values: `body_text`), through `WorkerCore.handle_batch` and
msgpack encoding of the deltas, as the worker process does. A core serves one round untimed first (a
worker is long-lived: its decode modes are built once). Interleaved repetitions, median, CPU time of
this process.
Vocabularies as the tests use them (tests/parsing/vocabularies.py); needs the `test` extra.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any, NamedTuple

import msgspec

from bench import _common
from detok.parsing.types import OutputParsing, ToolSpec
from detok.wire.params import DecodeParams
from detok.wire.packing import pack_rids, pack_u32
from detok.wire.to_workers import DetokBatch, EndRequest, Registration
from detok.worker.core import WorkerCore

REPLY_TO = "ipc:///nonexistent/bench-typed-worker"
TOOLS = (ToolSpec("f", {"type": "object", "properties": {"text": {"type": "string"}}}),)
_ARGS = '{"text": "'


class Row(NamedTuple):
    name: str
    vocab: str  # a function of tests/parsing/vocabularies.py
    reasoning: str | None
    tools: str | None
    section: str  # reasoning, content or arguments: where the timed ids are
    prefix: str  # the text that puts the request in the section
    starts_in_reasoning: bool | None = None  # OutputParsing's (None: the family's default)


# tool families whose string values are raw text (XML-like parameters), and whose are Python strings
RAW_VALUES = frozenset({"qwen3_coder", "glm45", "qwen3_xml", "seed_oss", "step3p5", "minimax_m2", "deepseek_v32",
                        "deepseek_v4", "gemma4", "kimi_k3"})
PYTHON_VALUES = frozenset({"pythonic", "llama4_pythonic"})
_QWEN_XML = "<tool_call>\n<function=f>\n<parameter=text>\n"
_DSML_PARAM = '<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="text" string="true">'
_K3_THINK = "<|open|>think<|sep|>"
_K3_CONTENT = _K3_THINK + "x<|close|>think<|sep|><|open|>response<|sep|>"
CONFIGS: list[Row] = [
    Row("qwen3", "qwen", "qwen3", None, "reasoning", "<think>"),
    Row("qwen3", "qwen", "qwen3", None, "content", "<think>x</think>"),
    Row("qwen3+hermes", "qwen", "qwen3", "hermes", "reasoning", "<think>"),
    Row("qwen3+hermes", "qwen", "qwen3", "hermes", "content", "<think>x</think>"),
    Row("qwen3+hermes", "qwen", "qwen3", "hermes", "arguments", '<think>x</think><tool_call>\n{"name": "f", "arguments": ' + _ARGS),
    Row("qwen3+qwen3_coder", "qwen", "qwen3", "qwen3_coder", "content", "<think>x</think>"),
    Row("qwen3+qwen3_coder", "qwen", "qwen3", "qwen3_coder", "arguments",
        "<think>x</think><tool_call>\n<function=f>\n<parameter=text>\n"),
    Row("deepseek_r1+deepseek_v31", "deepseek", "deepseek_r1", "deepseek_v31", "reasoning", "<think>"),
    Row("deepseek_r1+deepseek_v31", "deepseek", "deepseek_r1", "deepseek_v31", "arguments",
        "<think>x</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>" + _ARGS),
    Row("mistral+mistral", "mistral", "mistral", "mistral", "reasoning", "[THINK]"),
    Row("mistral+mistral", "mistral", "mistral", "mistral", "arguments", "[THINK]x[/THINK][TOOL_CALLS]f[ARGS]" + _ARGS),
    Row("kimi_k2+kimi_k2", "qwen_kimi", "kimi_k2", "kimi_k2", "content", "<think>x</think>"),
    Row("qwen3+llama3_json", "qwen", "qwen3", "llama3_json", "arguments",
        '<think>x</think>{"name": "f", "parameters": ' + _ARGS),
    Row("deepseek_r1+deepseek_v3", "deepseek", "deepseek_r1", "deepseek_v3", "arguments",
        "<think>x</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n" + _ARGS),
    Row("kimi_k2+kimi_k2", "qwen_kimi", "kimi_k2", "kimi_k2", "arguments",
        "<think>x</think><|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>" + _ARGS),
    Row("glm45+glm45", "qwen_glm", "glm45", "glm45", "content", "<think>x</think>"),
    Row("glm45+glm45", "qwen_glm", "glm45", "glm45", "arguments",
        "<think>x</think><tool_call>f\n<arg_key>text</arg_key><arg_value>"),
    Row("qwen3+hermes, markers as text", "gpt2", "qwen3", "hermes", "reasoning", "<think>"),
    Row("qwen3+hermes, markers as text", "gpt2", "qwen3", "hermes", "arguments",
        '<think>x</think><tool_call>\n{"name": "f", "arguments": ' + _ARGS),
    Row("openai_gptoss+openai", "harmony", "openai_gptoss", "openai", "reasoning", "<|channel|>analysis<|message|>x"),
    Row("openai_gptoss+openai", "harmony", "openai_gptoss", "openai", "content",
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>x"),
    Row("openai_gptoss+openai", "harmony", "openai_gptoss", "openai", "arguments",
        "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>" + _ARGS),
    # the table families (detok.parsing.family_tables); a template that opens reasoning in the
    # prompt: the request starts in it
    Row("deepseek_v3+deepseek_v32", "deepseek", "deepseek_v3", "deepseek_v32", "reasoning", "", True),
    Row("deepseek_v3+deepseek_v32", "deepseek", "deepseek_v3", "deepseek_v32", "content", "x</think>", True),
    Row("deepseek_v3+deepseek_v32", "deepseek", "deepseek_v3", "deepseek_v32", "arguments",
        "x</think><｜DSML｜function_calls>\n" + _DSML_PARAM, True),
    Row("deepseek_v3+deepseek_v4", "deepseek", "deepseek_v3", "deepseek_v4", "arguments",
        "x</think><｜DSML｜tool_calls>\n" + _DSML_PARAM, True),
    Row("seed_oss+seed_oss", "qwen_seed", "seed_oss", "seed_oss", "reasoning", ""),
    Row("seed_oss+seed_oss", "qwen_seed", "seed_oss", "seed_oss", "content", "x</seed:think>"),
    Row("seed_oss+seed_oss", "qwen_seed", "seed_oss", "seed_oss", "arguments",
        "x</seed:think><seed:tool_call>\n<function=f>\n<parameter=text>\n"),
    Row("nemotron_v3+qwen3_xml", "qwen", "nemotron_v3", "qwen3_xml", "reasoning", ""),
    Row("nemotron_v3+qwen3_xml", "qwen", "nemotron_v3", "qwen3_xml", "content", "x</think>"),
    Row("nemotron_v3+qwen3_xml", "qwen", "nemotron_v3", "qwen3_xml", "arguments", "x</think>" + _QWEN_XML),
    Row("olmo3+pythonic", "qwen", "olmo3", "pythonic", "reasoning", ""),
    Row("olmo3+pythonic", "qwen", "olmo3", "pythonic", "content", "x</think>"),
    Row("olmo3+pythonic", "qwen", "olmo3", "pythonic", "arguments", "x</think>[f(text='"),
    Row("minimax_m2+minimax_m2", "qwen", "minimax_m2", "minimax_m2", "reasoning", ""),
    Row("minimax_m2+minimax_m2", "qwen", "minimax_m2", "minimax_m2", "content", "x</think>"),
    Row("minimax_m2+minimax_m2", "qwen", "minimax_m2", "minimax_m2", "arguments",
        'x</think><minimax:tool_call>\n<invoke name="f">\n<parameter name="text">'),
    Row("gemma4+gemma4", "qwen_gemma4", "gemma4", "gemma4", "reasoning", "<|channel>thought\n"),
    Row("gemma4+gemma4", "qwen_gemma4", "gemma4", "gemma4", "content", "<|channel>thought\nx<channel|>"),
    Row("gemma4+gemma4", "qwen_gemma4", "gemma4", "gemma4", "arguments",
        '<|channel>thought\nx<channel|><|tool_call>call:f{text:<|"|>'),
    Row("kimi_k3+kimi_k3", "qwen_k3", "kimi_k3", "kimi_k3", "reasoning", _K3_THINK),
    Row("kimi_k3+kimi_k3", "qwen_k3", "kimi_k3", "kimi_k3", "content", _K3_CONTENT),
    Row("kimi_k3+kimi_k3", "qwen_k3", "kimi_k3", "kimi_k3", "arguments",
        _K3_THINK + 'x<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|>'
        '<|open|>argument key="text" type="string"<|sep|>'),
    Row("step3p5+step3p5", "qwen", "step3p5", "step3p5", "reasoning", ""),
    Row("step3p5+step3p5", "qwen", "step3p5", "step3p5", "content", "x</think>"),
    Row("step3p5+step3p5", "qwen", "step3p5", "step3p5", "arguments", "x</think>" + _QWEN_XML),
    Row("qwen3+qwen3_json", "qwen", "qwen3", "qwen3_json", "content", "<think>x</think>"),
    Row("qwen3+qwen3_json", "qwen", "qwen3", "qwen3_json", "arguments",
        '<think>x</think><tool_call>\n{"name": "f", "arguments": ' + _ARGS),
    Row("granite4", "qwen", None, "granite4", "content", "x"),
    Row("granite4", "qwen", None, "granite4", "arguments", '<tool_call>\n{"name": "f", "arguments": ' + _ARGS),
    Row("llama4_pythonic", "qwen_llama4", None, "llama4_pythonic", "content", "x"),
    Row("llama4_pythonic", "qwen_llama4", None, "llama4_pythonic", "arguments", "<|python_start|>[f(text='"),
]
def body_text(row: Row, text: str) -> str:
    """`text` as the row's section holds it: as it is, or as a JSON or Python string's text."""
    if row.section != "arguments" or row.tools in RAW_VALUES:
        return text
    if row.tools in PYTHON_VALUES:  # a single-quoted Python string
        return text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return json.dumps(text)[1:-1]


def _steps(tok: Any, n: int, first_rid: int, parsing: OutputParsing | None, prefix: list[int],
           body: list[int]) -> tuple[DetokBatch, list[DetokBatch], DetokBatch]:
    """(untimed start: registrations and prefixes, timed one-id steps, untimed end)."""
    rids = list(range(first_rid, first_rid + n))
    regs = [Registration(r, REPLY_TO, [], DecodeParams(), parsing=parsing) for r in rids]
    start = DetokBatch(1, 0.0, regs, pack_rids(rids), pack_u32([0] * n), pack_u32([len(prefix)] * n),
                       pack_u32(prefix * n), [])
    steps = [DetokBatch(2 + k, 0.0, [], pack_rids(rids), pack_u32([len(prefix) + k] * n), b"", pack_u32([i] * n), [])
             for k, i in enumerate(body)]
    end = DetokBatch(2 + len(body), 0.0, [], b"", b"", b"", b"", [EndRequest(r, "length") for r in rids])
    return start, steps, end


def _run(tok: Any, n: int, parsing: OutputParsing | None, prefix: list[int], body: list[int], fast: bool) -> float:
    core = WorkerCore(tok)
    core.table.typed_fast = fast
    encode = msgspec.msgpack.Encoder().encode
    for round_, timed in ((0, False), (1, True)):
        start, steps, end = _steps(tok, n, 1 + round_ * n, parsing, prefix, body)
        core.handle_batch(start)
        gc.collect()
        t0 = time.process_time()
        for step in steps:
            for _, batch in core.handle_batch(step).deltas:
                encode(batch)
        spent = time.process_time() - t0
        core.handle_batch(end)
    return spent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_common_args(p)
    p.add_argument("--requests", type=int, default=32, help="requests streaming at once")
    p.add_argument("--tokens", type=int, default=256, help="ids per request in the timed section")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rows", default="", help="only the rows whose name holds this text")
    args = p.parse_args()
    from tests.helpers.tokenizers_available import corpus_text
    from tests.parsing import vocabularies

    text = corpus_text().replace("<", "(")
    rows: list[dict[str, Any]] = []
    configs = [c for c in CONFIGS if args.rows in c.name]
    bar = _common.progress(len(configs) * args.repeats * 3, "typed worker", args.no_progress)
    for row in configs:
        name, vocab, rp, tp, section, prefix_text, starts = row
        try:
            tok = getattr(vocabularies, vocab)()
        except BaseException as e:  # noqa: BLE001 - a missing test package (pytest.skip) skips a row
            rows.append({"parser": name, "section": section, "skipped": f"{type(e).__name__}: {e}"})
            bar.update(args.repeats * 3)
            continue
        body = tok.encode(body_text(row, text[:20 * args.tokens]))[: args.tokens]
        prefix = tok.encode(prefix_text)
        parsing = OutputParsing(rp, tp, TOOLS if tp else (), starts, call_id_seed="bench")
        times: dict[str, list[float]] = {"plain": [], "typed": [], "typed_no_fast_path": []}
        for _ in range(args.repeats):
            times["plain"].append(_run(tok, args.requests, None, prefix, body, True))
            times["typed"].append(_run(tok, args.requests, parsing, prefix, body, True))
            times["typed_no_fast_path"].append(_run(tok, args.requests, parsing, prefix, body, False))
            bar.update(3)
        tokens = args.requests * len(body)
        ns = {k: statistics.median(v) / tokens * 1e9 for k, v in times.items()}
        rows.append({"parser": name, "vocabulary": vocab, "section": section, "tokens": tokens,
                     "plain_ns": round(ns["plain"], 1), "typed_ns": round(ns["typed"], 1),
                     "typed_no_fast_path_ns": round(ns["typed_no_fast_path"], 1),
                     "typed_extra_ns": round(ns["typed"] - ns["plain"], 1),
                     "no_fast_path_extra_ns": round(ns["typed_no_fast_path"] - ns["plain"], 1)})
    bar.close()
    if args.json:
        _common.emit({"bench": "typed_worker", "unit": "ns/token", "requests": args.requests, "rows": rows})
        return 0
    print(f"{'parser':32} {'section':10} {'plain':>7} {'typed':>7} {'extra':>7} {'no fast path':>13} {'extra':>7}  (ns/token)")
    for r in rows:
        if "skipped" in r:
            print(f"{r['parser']:32} {r['section']:10} skipped: {r['skipped']}")
            continue
        print(f"{r['parser']:32} {r['section']:10} {r['plain_ns']:7.0f} {r['typed_ns']:7.0f} {r['typed_extra_ns']:7.0f} "
              f"{r['typed_no_fast_path_ns']:13.0f} {r['no_fast_path_extra_ns']:7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
