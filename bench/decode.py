"""Decode micro-benchmark: per-token cost of detok and the anchors on the same token streams.

    python bench/decode.py [--tokenizer SOURCE ...] [--tokens 4096] [--streams 64] [--json] [--scaling]
    python bench/decode.py --per-request [--per-request-tokens 16,64,256] [--streams 300]

K streams of N output ids are stepped round-robin, one id per stream per scheduler step, by each
implementation in turn (same process, same streams; repetitions interleaved, median taken). Every
implementation's concatenated text is checked against the oracle (docs/tokenizers.md) and mismatches are
reported, not hidden: anchors may legitimately differ (see bench/baselines_decode.py).

Implementations: detok (DecodeStream.step one id at a time, as a one-element list; the streams
made by `DecodeStream.opener`), detok-int (the same, step with the int id), detok-init (detok-int
with each stream made by `DecodeStream(...)`, the plain constructor), detok-batch (the worker's batched
path: StreamTable.step_packed over the whole batch, packed wire columns in and out),
detok-batch+split (the same, plus cutting each step's text into one Python str per stream on the
clock), detok-batch+str (the step itself returns one str per stream: step_packed(row_texts=True),
an in-process caller's form), naive (full re-decode; only on the first
--naive-streams streams, it is O(N) per token), window (TGI / vLLM slow), sglang (batched
DetokenizerManager), hf-decodestream (tokenizers' DecodeStream, as vLLM v1 drives it).

Mismatches are counted against the §3 oracle (`_common.Oracle`: lossy UTF-8 of the token bytes
where the tokenizer is a verified byte map) and, as `mismatches_vs_decode`, against the literal
D(C + G)[len(D(C)):] of the tokenizer's decode; they differ only on invalid bytes under
Hugging Face's ByteFallback decoder.

--per-request: short requests as a server meets them, instead of the long-stream table: for each
length in --per-request-tokens, --streams streams are each created on the clock (prompt tail and
all: DecodeStream(...), StreamTable.open, HF DecodeStream primed as vLLM v1 does), stepped
interleaved one id per stream per step, and finished; CPU ns (this process's CPU time, robust to
other load on the machine) per output token and how many times faster than hf-decodestream
(`x_vs_hf`), per tokenizer and length.

--scaling adds a flat-cost check: ns/token on one 1K-token vs one 100K-token stream.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as `python bench/decode.py`: make the `bench` package importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import gc
import statistics
import time
from collections.abc import Sequence
from typing import Any

import detok
from bench import _common
from bench._common import TokenStream
from bench.decode_runners import DETOK, DETOK_INIT, DETOK_INT, IMPL_ORDER, _Runner, build_runners
from detok.stream import prepare_decoding


# ---- measuring -------------------------------------------------------------------------------------
def time_run(runner: _Runner, streams: Sequence[TokenStream], open_on_clock: bool = False) -> tuple[int, list[str]]:
    """Nanoseconds for every step and the finish (and the streams' creation if `open_on_clock`,
    then in this process's CPU time: on a machine shared with other work, time spent waiting for
    a core is not counted against whichever implementation happened to run then), and the texts."""
    clock = time.process_time_ns if open_on_clock else time.perf_counter_ns
    gc.collect()
    runner.prepare(streams)
    if not open_on_clock:
        runner.open(streams)
    n_steps = len(streams[0].ids) if streams else 0
    t0 = clock()
    if open_on_clock:
        runner.open(streams)
    for t in range(n_steps):
        runner.step(t)
    finished = runner.finish()
    ns = clock() - t0
    return ns, runner.collect(finished)


def measure(
    runners: Sequence[_Runner],
    streams: Sequence[TokenStream],
    oracles: Sequence[str],
    decodes: Sequence[str],
    repeats: int,
    bar: Any,
    open_on_clock: bool = False,
) -> dict[str, dict[str, Any]]:
    """Median ns/token per runner; mismatches against the oracle (§3) and against plain decode."""
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    checks: dict[str, dict[str, Any]] = {}
    for rep in range(repeats):
        # Rotate the order each repetition so drift on this shared machine hits all alike.
        for runner in runners[rep % len(runners) :] + runners[: rep % len(runners)]:
            subset = streams[: runner.max_streams] if runner.max_streams else streams
            ns, texts = time_run(runner, subset, open_on_clock)
            samples[runner.name].append(ns / max(1, sum(len(s.ids) for s in subset)))
            if runner.name not in checks:
                bad = [s.kind for s, text, want in zip(subset, texts, oracles) if text != want]
                checks[runner.name] = {
                    "streams": len(subset),
                    "mismatches": len(bad),
                    "mismatch_kinds": sorted(set(bad)),
                    "mismatches_vs_decode": sum(text != want for text, want in zip(texts, decodes)),
                }
            bar.update(1)
    return {name: {"ns_per_token": statistics.median(v), **checks[name]} for name, v in samples.items()}


# ---- tokenizers ------------------------------------------------------------------------------------
def load_tokenizers(args: argparse.Namespace) -> list[tuple[str, Any]]:
    if args.tokenizer:
        return [(source, detok.load_tokenizer(source)) for source in args.tokenizer]
    loaded = []
    for label, source in _common.default_tokenizer_sources():
        try:
            loaded.append((label, detok.load_tokenizer(source)))
        except Exception as e:  # a default that this checkout cannot load yet: say so, go on
            _common.log(f"skipping default tokenizer {label} ({source}): {e}".splitlines()[0])
            fallback = _common.mistral_v1_source() if label == "llama-spm" else None
            if fallback is not None:
                try:
                    loaded.append(("mistral-v1-spm", detok.load_tokenizer(fallback)))
                except Exception as e2:
                    _common.log(f"skipping mistral-v1-spm ({fallback}): {e2}".splitlines()[0])
    return loaded


def run_decode_bench(label: str, tok: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    plan = prepare_decoding(tok)  # once per tokenizer, before any timing (as the worker does)
    streams = _common.make_streams(tok, args.tokens, args.streams, args.seed, args.kinds)
    oracle = _common.Oracle(tok)
    oracles = [oracle.text(s) for s in streams]
    decodes = [_common.oracle_text(tok, s) for s in streams]
    runners = build_runners(tok, args.naive_streams, args.impl)
    bar = _common.progress(len(runners) * args.repeats, f"decode {label}", args.no_progress)
    try:
        results = measure(runners, streams, oracles, decodes, args.repeats, bar)
    finally:
        bar.close()
    base = results.get(DETOK, {}).get("ns_per_token")
    records = []
    for name in IMPL_ORDER:
        if name in results:
            r = results[name]
            records.append({
                "bench": "decode",
                "tokenizer": label,
                "impl": name,
                "ns_per_token": round(r["ns_per_token"], 1),
                "ratio_vs_detok": round(r["ns_per_token"] / base, 2) if base else None,
                "mismatches": r["mismatches"],
                "mismatch_kinds": r["mismatch_kinds"],
                "mismatches_vs_decode": r["mismatches_vs_decode"],
                "streams": r["streams"],
                "tokens_per_stream": args.tokens,
                "repeats": args.repeats,
                **({"strategy": plan.strategy} if name == DETOK else {}),
            })
    return records


PER_REQUEST_IMPLS = (DETOK, DETOK_INT, DETOK_INIT, "detok-batch+split", "detok-batch+str", "hf-decodestream")


def run_per_request(label: str, tok: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Streams created on the clock, stepped interleaved, finished: per length, ns/token and the
    ratio to Hugging Face's DecodeStream (same run, repetitions interleaved)."""
    prepare_decoding(tok)  # once per tokenizer (as a worker or an embedder's start does)
    oracle = _common.Oracle(tok)
    records = []
    for length in args.per_request_tokens:
        streams = _common.make_streams(tok, length, args.streams, args.seed, args.kinds)
        oracles = [oracle.text(s) for s in streams]
        decodes = [_common.oracle_text(tok, s) for s in streams]
        runners = build_runners(tok, 0, (*(args.impl or PER_REQUEST_IMPLS), "hf-decodestream"))
        bar = _common.progress(len(runners) * args.repeats, f"per-request {label} {length}", args.no_progress)
        try:
            results = measure(runners, streams, oracles, decodes, args.repeats, bar, open_on_clock=True)
        finally:
            bar.close()
        hf = results.get("hf-decodestream", {}).get("ns_per_token")
        for name in IMPL_ORDER:
            if name in results:
                r = results[name]
                records.append({
                    "bench": "decode-per-request", "tokenizer": label, "impl": name, "tokens_per_stream": length,
                    "streams": r["streams"], "ns_per_token": round(r["ns_per_token"], 1),
                    "x_vs_hf": round(hf / r["ns_per_token"], 2) if hf else None,
                    "mismatches": r["mismatches"], "mismatches_vs_decode": r["mismatches_vs_decode"],
                    "repeats": args.repeats,
                })
    return records


def _print_per_request(records: Sequence[dict[str, Any]]) -> None:
    print(f"{'tokenizer':<16} {'tokens':>6} {'impl':<18} {'ns/token':>10} {'x hf':>6} {'mismatch':>9}")
    for r in records:
        ratio = f"{r['x_vs_hf']:.2f}" if r["x_vs_hf"] is not None else "-"
        print(f"{r['tokenizer']:<16} {r['tokens_per_stream']:>6} {r['impl']:<18} {r['ns_per_token']:>10.1f} {ratio:>6} "
              f"{r['mismatches']:>4}/{r['streams']}")


def run_scaling(label: str, tok: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """ns/token of one short vs one long corpus stream; flat cost means a ratio near 1."""
    small, large = args.scaling_sizes
    runners = build_runners(tok, 0, (DETOK, "detok-batch", "window", "hf-decodestream"))
    short = _common.make_streams(tok, small, 1, args.seed, kinds=("corpus",))
    long = _common.make_streams(tok, large, 1, args.seed, kinds=("corpus",))
    copies = max(1, large // small)  # run the short stream as often as it takes to match the token count
    bar = _common.progress(len(runners) * args.repeats * 2, f"scaling {label}", args.no_progress)
    per: dict[str, dict[int, list[float]]] = {r.name: {small: [], large: []} for r in runners}
    for _ in range(args.repeats):
        for runner in runners:
            ns = sum(time_run(runner, short)[0] for _ in range(copies))
            per[runner.name][small].append(ns / (copies * small))
            bar.update(1)
            per[runner.name][large].append(time_run(runner, long)[0] / large)
            bar.update(1)
    bar.close()
    records = []
    for name, by_size in per.items():
        a, b = statistics.median(by_size[small]), statistics.median(by_size[large])
        records.append({
            "bench": "decode-scaling", "tokenizer": label, "impl": name,
            f"ns_per_token_{small}": round(a, 1), f"ns_per_token_{large}": round(b, 1),
            "ratio_large_vs_small": round(b / a, 2),
        })
    return records


def _print_table(records: Sequence[dict[str, Any]]) -> None:
    width = max([len("tokenizer")] + [len(r["tokenizer"]) for r in records])
    print(f"{'tokenizer':<{width}} {'impl':<18} {'ns/token':>10} {'x detok':>8} {'mismatch':>9}  kinds")
    for r in records:
        ratio = f"{r['ratio_vs_detok']:.2f}" if r["ratio_vs_detok"] is not None else "-"
        mism = f"{r['mismatches']}/{r['streams']}"
        kinds = ",".join(r["mismatch_kinds"])
        print(f"{r['tokenizer']:<{width}} {r['impl']:<18} {r['ns_per_token']:>10.1f} {ratio:>8} {mism:>9}  {kinds}")


def _print_scaling(records: Sequence[dict[str, Any]]) -> None:
    for r in records:
        small, large = (k for k in r if k.startswith("ns_per_token_"))
        print(f"scaling {r['tokenizer']} {r['impl']}: {r[small]:.1f} ns/token at {small[13:]} tokens, "
              f"{r[large]:.1f} at {large[13:]} (x{r['ratio_large_vs_small']})")


def _two_sizes(text: str) -> tuple[int, int]:
    small, large = (int(x) for x in text.split(","))
    if not 0 < small < large:
        raise argparse.ArgumentTypeError("want two lengths, short,long, with 0 < short < long")
    return small, large


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_common_args(parser)
    parser.add_argument("--tokens", type=int, default=4096, help="output tokens per stream (default 4096)")
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions; the median is kept")
    parser.add_argument("--naive-streams", type=int, default=2, help="streams the O(N)-per-token naive anchor runs")
    parser.add_argument("--impl", action="append", choices=IMPL_ORDER, help="only these implementations")
    parser.add_argument("--kinds", type=lambda s: tuple(s.split(",")), default=_common.STREAM_KINDS,
                        help=f"stream kinds, cycled over the streams (default {','.join(_common.STREAM_KINDS)})")
    parser.add_argument("--per-request", action="store_true",
                        help="streams created on the clock, short lengths (see --per-request-tokens), vs hf-decodestream")
    parser.add_argument("--per-request-tokens", type=lambda t: [int(x) for x in t.split(",")], default=[16, 64, 256],
                        help="stream lengths of --per-request (default 16,64,256)")
    parser.add_argument("--scaling", action="store_true", help="also the 1K vs 100K-token flat-cost check")
    parser.add_argument("--scaling-sizes", type=_two_sizes, default=(1000, 100_000),
                        help="short,long stream lengths of --scaling (default 1000,100000)")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.streams < 1 or args.repeats < 1:
        parser.error("--tokens, --streams and --repeats must be positive")
    unknown = set(args.kinds) - set(_common.STREAM_KINDS)
    if unknown:
        parser.error(f"unknown stream kinds {sorted(unknown)}; choose from {sorted(set(_common.STREAM_KINDS))}")
    if args.impl and DETOK not in args.impl:
        args.impl.append(DETOK)  # ratios are against detok
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tokenizers = load_tokenizers(args)
    if not tokenizers:
        _common.log("no tokenizer could be loaded")
        return 1
    table: list[dict[str, Any]] = []
    scaling: list[dict[str, Any]] = []
    if args.per_request:
        per_request = []
        for label, tok in tokenizers:
            for record in run_per_request(label, tok, args):
                per_request.append(record)
                if args.json:
                    _common.emit(record)
        if not args.json:
            _print_per_request(per_request)
        return 0
    for label, tok in tokenizers:
        for record in run_decode_bench(label, tok, args):
            table.append(record)
            if args.json:
                _common.emit(record)
        for record in run_scaling(label, tok, args) if args.scaling else []:
            scaling.append(record)
            if args.json:
                _common.emit(record)
    if not args.json:
        _print_table(table)
        _print_scaling(scaling)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
