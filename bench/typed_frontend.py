"""Typed output (reasoning, content, tool calls): CPU per streamed token and chunk in the frontend, and
per token in the worker, for chat output with reasoning and tool calls, side by side in one run:

- `plain`: the same ids as a plain-text request (no parsing anywhere): the frontend renders one
  content chunk per delta (the baseline);
- `detok`: parsed in the worker (qwen3 + hermes); the frontend receives typed rows and only shapes
  them into reasoning / content / tool_calls chunks;
- `parse-in-frontend`: the peers' approach (vLLM's and SGLang's serving layer): the frontend receives
  plain text and runs the same parser on each delta itself, then renders the same chunks. It uses
  detok's own incremental parsers (markers matched in the text, as a frontend holding text only
  must), so it is a lower bound of the peers' cost: their streaming parsers re-scan the text so far
  and diff partial JSON on every delta.

    python -m bench.typed_frontend [--tokenizer SRC] [--concurrency 64] [--repeats 5] [--json]

Messages are made by a WorkerCore in-process (off the clock), one token per request per step; each
configuration then handles them as a frontend does: decode, DeltaReceiver dispatch, per request
`take()`, chunk bytes. The worker figures time `WorkerCore.handle_batch` on the same steps, plain
and parsed (`detok_no_fast_path`: every id of a parsed request through its parser, the path before
detok.stream.typed_fast). Interleaved repetitions, median kept, CPU time of this process. `--json`: one JSON line.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

import detok
from bench import _common
from detok import wire
from detok.streaming.chunks import ChunkRenderer
from detok.api.typed_responses import TypedChoice
from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing, Piece, ToolSpec
from detok.receiver.receiver import DeltaReceiver, RequestDelta
from detok.wire.params import DecodeParams
from detok.wire.packing import pack_rids, pack_u32
from detok.wire.to_workers import DetokBatch, EndRequest, Registration
from detok.worker.core import WorkerCore

PARSING = OutputParsing("qwen3", "hermes", (ToolSpec("get_weather", {"type": "object"}), ToolSpec("search")))
REPLY_TO = "ipc:///nonexistent/bench-typed"


def reply(i: int) -> str:
    return (f"<think>The user asks about the weather in city number {i} and wants a short, friendly answer. "
            "I should call the weather tool first, then search for events; 北京 and Zürich are examples.</think>"
            f"Sure, let me look that up for you (request {i}).\n"
            f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "City {i}", "unit": "celsius", '
            '"days": [1, 2, 3]}}\n</tool_call>\n'
            f'<tool_call>\n{{"name": "search", "arguments": {{"query": "events in city {i} this weekend", '
            '"limit": 10}}\n</tool_call>')


def make_steps(tok: Any, n: int, parsing: OutputParsing | None, skip_special: bool,
               first_rid: int = 0) -> tuple[list[DetokBatch], int]:
    """One DetokBatch per step, one token per request per step (registrations in the first)."""
    rids = range(first_rid, first_rid + n)
    ids = {rid: tok.encode(reply(rid - first_rid)) for rid in rids}
    params = DecodeParams(skip_special_tokens=skip_special)
    regs = [Registration(rid, REPLY_TO, [], params, parsing=parsing) for rid in rids]
    steps = []
    eos = min(tok.eos_token_ids)
    for k in range(max(map(len, ids.values()))):
        rows = [rid for rid in rids if k < len(ids[rid])]
        ends = [EndRequest(rid, "stop", eos) for rid in rows if k == len(ids[rid]) - 1]
        steps.append(DetokBatch(k + 1, 0.0, regs if k == 0 else [], pack_rids(rows), pack_u32([k] * len(rows)), b"",
                                pack_u32([ids[rid][k] for rid in rows]), ends))
    return steps, sum(map(len, ids.values()))


def frontend_messages(tok: Any, steps: list[DetokBatch]) -> list[bytes]:
    core = WorkerCore(tok)
    encode = msgspec.msgpack.Encoder().encode
    out = []
    for step in steps:
        for _, batch in core.handle_batch(step).deltas:
            out.append(encode(batch))
    return out


def run_frontend(messages: list[bytes], n: int, mode: str) -> tuple[float, int]:
    """CPU seconds to turn `messages` into chunk bytes as a frontend does; and the chunk count."""
    rx = DeltaReceiver()
    try:
        decoder = wire.frontend_inbound_decoder()
        render = ChunkRenderer("chat", "chatcmpl-bench", 0, "m", 1)
        streams = [rx.open(rid) for rid in range(n)]
        choices = [TypedChoice("reasoning", True, True, True, True) for _ in range(n)]
        parsers = ([OutputParser(PARSING, lambda _t: None) for _ in range(n)] if mode == "parse-in-frontend"
                   else [])
        chunks = 0
        sink: list[bytes] = []
        t0 = time.process_time()
        for raw in messages:
            rx.dispatch(decoder.decode(raw))
            for rid in range(n):
                delta = streams[rid].take()
                if delta is None:
                    continue
                if mode == "plain":
                    out = [render.text(0, delta.text)] if delta.text else []
                elif mode == "detok":
                    out = choices[rid].chunks(render, 0, delta, None)
                else:
                    out = choices[rid].chunks(render, 0, _parsed(parsers[rid], delta), None)
                chunks += len(out)
                sink.extend(out)
            sink.clear()
        return time.process_time() - t0, chunks
    finally:
        rx.close()


def _parsed(parser: OutputParser, delta: RequestDelta) -> RequestDelta:
    """The peers' way: the frontend parses the delta's text itself."""
    typed = parser.feed(Piece(delta.text)) if delta.text else None
    if delta.finish is not None:
        end = parser.finish()
        if typed is None:
            typed = end
        else:
            typed.reasoning += end.reasoning
            typed.content += end.content
            typed.tool_calls.extend(end.tool_calls)
    if typed is None:
        return RequestDelta("", delta.finish, delta.num_tokens)
    return RequestDelta(typed.content, delta.finish, delta.num_tokens, None, typed.reasoning, tuple(typed.tool_calls))


def run_worker(tok: Any, steps: list[DetokBatch], warm_up: list[DetokBatch], typed_fast: bool = True) -> float:
    """CPU seconds of a worker core that has already served `warm_up` (other rids): a worker is
    long-lived, what it builds once (decode modes, tables) is not on the clock."""
    core = WorkerCore(tok)
    core.table.typed_fast = typed_fast
    encode = msgspec.msgpack.Encoder().encode
    for step in warm_up:
        core.handle_batch(step)
    t0 = time.process_time()
    for step in steps:
        for _, batch in core.handle_batch(step).deltas:
            encode(batch)
    return time.process_time() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_common_args(p)
    p.add_argument("--concurrency", type=int, default=64, help="requests streaming at once")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    if args.tokenizer:
        source = args.tokenizer[0]
    else:
        from tests.helpers.tokenizers_available import qwen3_6_tiktoken  # the test extra's Qwen3.6 vocabulary

        source = str(qwen3_6_tiktoken())
    tok = detok.load_tokenizer(source)
    n = args.concurrency
    _common.log(f"typed_frontend: {n} requests, tokenizer {source}")
    plain_steps, tokens = make_steps(tok, n, None, skip_special=False)  # markers stay in the text
    typed_steps, _ = make_steps(tok, n, PARSING, skip_special=True)
    worker_plain_steps, _ = make_steps(tok, n, None, skip_special=True)  # the worker's baseline: same params
    warm_plain, _ = make_steps(tok, 2, None, skip_special=True, first_rid=10_000)
    warm_typed, _ = make_steps(tok, 2, PARSING, skip_special=True, first_rid=10_000)
    messages = {"plain": frontend_messages(tok, plain_steps), "detok": frontend_messages(tok, typed_steps)}
    messages["parse-in-frontend"] = messages["plain"]
    fe: dict[str, list[float]] = {name: [] for name in messages}
    chunks: dict[str, int] = {}
    wk: dict[str, list[float]] = {"plain": [], "detok": [], "detok_no_fast_path": []}
    gc.collect()
    gc.freeze()
    bar = _common.progress(args.repeats * 6, "typed frontend", args.no_progress)
    runners: list[tuple[str, Callable[[], None]]] = []
    for name in messages:
        def fe_run(name: str = name) -> None:
            t, c = run_frontend(messages[name], n, name)
            fe[name].append(t)
            chunks[name] = c
        runners.append((name, fe_run))
    runners.append(("worker-plain", lambda: wk["plain"].append(run_worker(tok, worker_plain_steps, warm_plain))))
    runners.append(("worker-detok", lambda: wk["detok"].append(run_worker(tok, typed_steps, warm_typed))))
    runners.append(("worker-detok-no-fast-path", lambda: wk["detok_no_fast_path"].append(
        run_worker(tok, typed_steps, warm_typed, typed_fast=False))))
    for _ in range(args.repeats):
        for _name, run in runners:
            run()
            bar.update(1)
    bar.close()
    record: dict[str, Any] = {"bench": "typed_frontend", "requests": n, "tokens": tokens, "repeats": args.repeats}
    for name in messages:
        t = statistics.median(fe[name])
        record[f"frontend_{name}_ns_per_token"] = round(t / tokens * 1e9, 1)
        record[f"frontend_{name}_chunks"] = chunks[name]
        record[f"frontend_{name}_ns_per_chunk"] = round(t / max(1, chunks[name]) * 1e9, 1)
    for name in wk:
        record[f"worker_{name}_ns_per_token"] = round(statistics.median(wk[name]) / tokens * 1e9, 1)
    record["frontend_parse_in_frontend_over_detok"] = round(
        statistics.median(fe["parse-in-frontend"]) / statistics.median(fe["detok"]), 2)
    record["worker_extra_ns_per_token"] = round(
        (statistics.median(wk["detok"]) - statistics.median(wk["plain"])) / tokens * 1e9, 1)
    _common.report(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
