"""Frontend CPU per token for logprobs: detok (the workers rendered each entry's chat JSON item,
`logprobs_form="chat"`; the frontend joins them), the workers' token strings and floats written
into OpenAI's chat `logprobs` JSON by the frontend (`detok-frontend-writer`: `chat_logprobs_json`,
detok's way before the workers rendered), the same entries through per-token Structs encoded by
msgspec (`detok-structs`: the frontend's way before that writer), against the
vLLM / SGLang way (the frontend decodes every sampled and top-k id on its own - K+1 `tokenizers`
decode calls per token, a lower bound of vLLM's `convert_ids_list_to_tokens` - then formats the
same), and against no logprobs at all.

    python bench/logprobs_frontend.py [--tokenizer SRC] [--logprobs 5] [--concurrency 256]
                                      [--tokens 128] [--repeats 3] [--json]

The pool benchmark's workload runs through a WorkerCore once (off the clock); each configuration
then handles the resulting DeltaBatch messages as a frontend does: decode, DeltaReceiver dispatch,
per request `take()`, build and encode the chunk's logprobs object. Interleaved repetitions,
median kept, CPU time of this process (the prepared messages frozen out of the collector's reach,
as a serving frontend freezes its startup heap); one JSON line per configuration with --json.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/logprobs_frontend.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import gc
import statistics
import sys
import time
from typing import Any

from bench import _common
import msgspec
import numpy as np
from bench.pool_drivers import LogprobTable, Workload
from bench.worker import encode_workload

import detok
from detok import wire
from detok.streaming.chat_logprobs_json import chat_logprobs_json
from detok.streaming.logprobs_format import chat_logprobs
from detok.receiver.receiver import DeltaReceiver
from detok.receiver.token_logprobs import TokenLogprobs
from detok.worker.core import WorkerCore


def frontend_messages(tok: Any, workload: Workload, table: LogprobTable | None, form: str = "entries") -> list[bytes]:
    """The encoded DeltaBatches a frontend receives for the workload (one worker, in-process)."""
    core = WorkerCore(tok, 0, idle_timeout_s=3600)
    decoder, encoder = wire.worker_inbound_decoder(), wire.new_encoder()
    out = []
    for raw in encode_workload(workload, 1, table, form):
        for _, batch in core.handle_batch(decoder.decode(raw)).deltas:
            out.append(encoder.encode(batch))
    return out


def without_strings(messages: list[bytes]) -> list[bytes]:
    """The same messages with empty token strings: what a frontend gets that decodes ids itself."""
    decoder, encoder = wire.frontend_inbound_decoder(), wire.new_encoder()
    out = []
    for raw in messages:
        batch = decoder.decode(raw)
        lp = batch.logprobs
        if lp is not None:
            n = (len(lp.token_ids) + len(lp.top_ids)) // 4
            batch.logprobs = msgspec.structs.replace(lp, text=b"", lengths=bytes(4 * n), raw=b"")
        out.append(encoder.encode(batch))
    return out


def run_once(messages: list[bytes], rids: list[int], k: int, decode_ids: Any = None, render: Any = None) -> float:
    """CPU seconds for a frontend to handle every message: dispatch, take per request, format, encode."""
    return handle(messages, rids, k, decode_ids, render)[0]


def handle(messages: list[bytes], rids: list[int], k: int, decode_ids: Any = None,
           render: Any = None) -> tuple[float, int]:
    """`run_once`'s work: its CPU seconds and how many logprob payloads it formatted (for tests)."""
    rx = DeltaReceiver()
    streams = {rid: rx.open(rid) for rid in rids}
    decoder = wire.frontend_inbound_decoder()
    encode = msgspec.json.Encoder().encode
    render = render or chat_logprobs_json
    formatted = 0
    t0 = time.process_time()  # CPU time: the 2 cores are shared, wall time counts other processes' turns
    for raw in messages:
        batch = decoder.decode(raw)
        rx.dispatch(batch)
        for rid in np.frombuffer(batch.rids, dtype="<u8").tolist():
            stream = streams.get(rid)
            delta = stream.take() if stream is not None else None
            if delta is None or delta.logprobs is None:
                continue
            lp = delta.logprobs
            if decode_ids is not None:  # the frontend makes the strings: one decode per id
                lp = TokenLogprobs(lp.first, lp.token_ids, [decode_ids([i]) for i in lp.token_ids], lp.logprobs,
                                   lp.top_counts, lp.top_ids, [decode_ids([i]) for i in lp.top_ids], lp.top_logprobs)
            encode(render(lp, k))
            formatted += 1
    seconds = time.process_time() - t0
    rx.close()
    return seconds, formatted


def workload_args(doc: str | None, repeats: int) -> argparse.Namespace:
    """This benchmark's command line."""
    return workload_parser(doc, repeats).parse_args()


def workload_parser(doc: str | None, repeats: int) -> argparse.ArgumentParser:
    """This benchmark's options (also bench/push_rows.py's, which adds its own)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(p)
    p.add_argument("--logprobs", type=int, default=5, metavar="K", help="alternatives per token (top_logprobs)")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--kinds", default="corpus,multilingual", help="token stream kinds (bench/_common.py)")
    return p


def workload_of(args: argparse.Namespace) -> tuple[Any, Workload, LogprobTable]:
    """(tokenizer, the pool benchmark's workload, its logprob table) for the command line's sizes."""
    source = args.tokenizer[0] if args.tokenizer else _common.default_tokenizer_sources()[0][1]
    tok = detok.load_tokenizer(source)
    streams = _common.make_streams(tok, args.tokens, args.concurrency, args.seed, tuple(args.kinds.split(",")))
    outputs = np.ascontiguousarray(np.array([s.ids for s in streams], dtype=np.uint32).T)
    workload = Workload([list(s.context) for s in streams], outputs, 1)
    return tok, workload, LogprobTable.make(outputs, args.logprobs, tok.vocab_size, args.seed)


def main() -> int:
    args = workload_args(__doc__, 3)
    tok, workload, table = workload_of(args)
    hf = getattr(tok, "hf_tokenizer", None)
    decode_ids = hf.decode if hf is not None else (lambda ids: tok.decode(ids, skip_special_tokens=False))
    with_strings = frontend_messages(tok, workload, table)
    configs = {  # name: (messages, ids decoded in the frontend by, logprobs object made by)
        "no-logprobs": (frontend_messages(tok, workload, None), None, None),
        "detok": (frontend_messages(tok, workload, table, "chat"), None, chat_logprobs_json),
        "detok-frontend-writer": (with_strings, None, chat_logprobs_json),
        "detok-structs": (with_strings, None, chat_logprobs),
        "decode-in-frontend": (without_strings(with_strings), decode_ids, chat_logprobs),
    }
    rids = list(range(workload.requests))
    tokens = workload.requests * workload.tokens
    times: dict[str, list[float]] = {name: [] for name in configs}
    # the prepared messages out of the collector's reach, as a serving process freezes its startup heap
    gc.collect()
    gc.freeze()
    bar = _common.progress(args.repeats * len(configs), "frontend logprobs", args.no_progress)
    for _ in range(args.repeats):
        for name, (messages, decode, render) in configs.items():
            times[name].append(run_once(messages, rids, args.logprobs, decode, render))
            bar.update(1)
    bar.close()
    base = statistics.median(times["no-logprobs"])
    for name in configs:
        t = statistics.median(times[name])
        record = {"bench": "logprobs_frontend", "config": name, "top_logprobs": args.logprobs, "tokens": tokens,
                  "ns_per_token": round(t / tokens * 1e9, 1), "extra_ns_per_token": round((t - base) / tokens * 1e9, 1)}
        _common.report(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
