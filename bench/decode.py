"""Decode micro-benchmark: per-token cost of detok and the anchors on the same token streams.

    python bench/decode.py [--tokenizer SOURCE ...] [--tokens 4096] [--streams 64] [--json] [--scaling]

K streams of N output ids are stepped round-robin, one id per stream per scheduler step, by each
implementation in turn (same process, same streams; repetitions interleaved, median taken). Every
implementation's concatenated text is checked against the oracle (DESIGN §3) and mismatches are
reported, not hidden: anchors may legitimately differ (see bench/baselines_decode.py).

Implementations: detok (DecodeStream.step one id at a time), detok-batch (the worker's batched
path: StreamTable.step_packed over the whole batch, packed wire columns in and out),
detok-batch+split (the same, plus cutting each step's text into one Python str per stream on the
clock), naive (full re-decode; only on the first
--naive-streams streams, it is O(N) per token), window (TGI / vLLM slow), sglang (batched
DetokenizerManager), hf-decodestream (tokenizers' DecodeStream, as vLLM v1 drives it).

Mismatches are counted against the §3 oracle (`_common.Oracle`: lossy UTF-8 of the token bytes
where the tokenizer is a verified byte map) and, as `mismatches_vs_decode`, against the literal
D(C + G)[len(D(C)):] of the tokenizer's decode; they differ only on invalid bytes under
Hugging Face's ByteFallback decoder.

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

import numpy as np
from collections.abc import Sequence
from typing import Any

from bench import _common
import detok
from detok.wire.packing import split_text
from detok.stream import prepare_decoding
from bench._common import TokenStream
from bench.baselines_decode import ANCHORS, SGLangDetokenizer

DETOK = "detok"
IMPL_ORDER = (DETOK, "detok-batch", "detok-batch+split", "naive", "window", "sglang", "hf-decodestream")


# ---- runners: the same harness loop around every implementation ------------------------------------
class _Runner:
    """start (untimed: per-request setup) -> step(t) for each scheduler step -> finish (texts)."""

    name = ""
    max_streams: int | None = None

    def start(self, streams: Sequence[TokenStream]) -> None:
        self._singles = [[[i] for i in s.ids] for s in streams]  # prebuilt: no list churn in the loop
        self._parts: list[list[str]] = [[] for _ in streams]

    def step(self, t: int) -> None:
        raise NotImplementedError

    def finish(self) -> list[Any]:
        raise NotImplementedError

    def collect(self, finished: list[Any]) -> list[str]:
        """The texts, from what `finish` returned (after the clock stopped)."""
        return finished


class _DetokRunner(_Runner):
    name = DETOK

    def __init__(self, tok: Any, params: Any) -> None:
        self._make = lambda ctx: detok.DecodeStream(tok, context_ids=ctx, params=params, ignore_eos=True)

    def start(self, streams: Sequence[TokenStream]) -> None:
        super().start(streams)
        self._streams = [self._make(s.context) for s in streams]

    def step(self, t: int) -> None:
        for stream, singles, parts in zip(self._streams, self._singles, self._parts):
            parts.append(stream.step(singles[t]).text)

    def finish(self) -> list[str]:
        return ["".join(p) + s.finish("length").text for s, p in zip(self._streams, self._parts)]


class _AnchorRunner(_Runner):
    def __init__(self, name: str, decoder: Any, max_streams: int | None = None) -> None:
        self.name = name
        self._cls = ANCHORS[name]
        self._decoder = decoder
        self.max_streams = max_streams

    def start(self, streams: Sequence[TokenStream]) -> None:
        super().start(streams)
        self._objs = [self._cls(self._decoder, s.context, True) for s in streams]

    def step(self, t: int) -> None:
        for obj, singles, parts in zip(self._objs, self._singles, self._parts):
            parts.append(obj.step(singles[t]))

    def finish(self) -> list[str]:
        return ["".join(p) + o.flush() for o, p in zip(self._objs, self._parts)]


class _SGLangRunner(_Runner):
    """One `step_batch` per scheduler step over all streams, as SGLang's detokenizer process."""

    name = "sglang"

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder

    def start(self, streams: Sequence[TokenStream]) -> None:
        super().start(streams)
        self._manager = SGLangDetokenizer(self._decoder, skip_special_tokens=True)
        self._rids = [f"r{k}" for k in range(len(streams))]
        self._first = [s.context + s.ids[:1] for s in streams]
        self._context_lens = [len(s.context) for s in streams]
        self._not_finished = [False] * len(streams)

    def step(self, t: int) -> None:
        if t == 0:
            texts = self._manager.step_batch(self._rids, self._first, self._not_finished, self._context_lens)
        else:
            texts = self._manager.step_batch(self._rids, [s[t] for s in self._singles], self._not_finished)
        for parts, text in zip(self._parts, texts):
            parts.append(text)

    def finish(self) -> list[str]:
        n = len(self._rids)
        tails = self._manager.step_batch(self._rids, [[] for _ in range(n)], [True] * n)
        return ["".join(p) + tail for p, tail in zip(self._parts, tails)]


class _DetokBatchRunner(_Runner):
    """The worker's batched path: `StreamTable.step_packed` over the whole batch, on the packed
    columns a worker gets off the wire, producing the packed columns it sends (one UTF-8 blob and
    per-row lengths and offsets). With `split`, each step's blob is also cut into per-row Python
    strings on the clock (what a consumer wanting one str per stream per step would pay); without,
    that happens after the clock stops, for the mismatch check only."""

    def __init__(self, tok: Any, params: Any, table_cls: type, split: bool = False) -> None:
        self._tok, self._params, self._table_cls, self._split = tok, params, table_cls, split
        self.name = "detok-batch+split" if split else "detok-batch"

    def start(self, streams: Sequence[TokenStream]) -> None:
        super().start(streams)
        self._table = self._table_cls(self._tok)
        n = len(streams)
        for rid, s in enumerate(streams):
            self._table.open(rid, s.context, self._params, ignore_eos=True)
        # Columns as the worker gets them off the wire: packed little-endian rids, starts, ids.
        self._rids = np.arange(n, dtype="<u8").tobytes()
        self._columns = [np.array(col, dtype="<u4").tobytes() for col in zip(*(s.ids for s in streams))]
        self._starts = [np.full(n, t, dtype="<u4").tobytes() for t in range(len(self._columns))]
        self._out: list[Any] = []

    def step(self, t: int) -> None:
        out = self._table.step_packed(self._rids, self._starts[t], b"", self._columns[t])
        self._out.append(split_text(out.text, out.lengths) if self._split else out)

    def finish(self) -> list[Any]:
        return [self._table.finish(rid, "length")[0] for rid in range(len(self._parts))]

    def collect(self, tails: list[Any]) -> list[str]:
        for out in self._out:
            texts = out if self._split else split_text(out.text, out.lengths)
            for parts, text in zip(self._parts, texts):
                parts.append(text)
        return ["".join(p) + tail for p, tail in zip(self._parts, tails)]


def _detok_batch_runners(tok: Any, params: Any) -> list[_Runner]:
    try:
        from detok.stream.table import StreamTable
    except ImportError:
        _common.log("detok has no batched decode path (detok.stream.table.StreamTable): detok-batch skipped")
        return []
    return [_DetokBatchRunner(tok, params, StreamTable), _DetokBatchRunner(tok, params, StreamTable, split=True)]


class _DecodeAdapter:
    """`decode` / `decode_batch` of a non-Hugging Face detok tokenizer, for the window anchors."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens, spaces_between_special_tokens=False)

    def decode_batch(self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(s, skip_special_tokens) for s in seqs]


def build_runners(tok: Any, naive_streams: int, only: Sequence[str] | None = None) -> list[_Runner]:
    params = detok.DecodeParams(skip_special_tokens=True)
    hf = getattr(tok, "hf_tokenizer", None)
    decoder = hf if hf is not None else _DecodeAdapter(tok)
    runners: list[_Runner | None] = [
        _DetokRunner(tok, params),
        *_detok_batch_runners(tok, params),
        _AnchorRunner("naive", decoder, max_streams=naive_streams),
        _AnchorRunner("window", decoder),
        _SGLangRunner(decoder),
        _AnchorRunner("hf-decodestream", hf) if hf is not None else None,
    ]
    if hf is None:
        _common.log(f"{tok!r} is not a Hugging Face tokenizer: no hf-decodestream anchor")
    return [r for r in runners if r is not None and (only is None or r.name in only)]


# ---- measuring -------------------------------------------------------------------------------------
def time_run(runner: _Runner, streams: Sequence[TokenStream]) -> tuple[int, list[str]]:
    """Nanoseconds for every step and the finish, and the texts."""
    gc.collect()
    runner.start(streams)
    n_steps = len(streams[0].ids) if streams else 0
    t0 = time.perf_counter_ns()
    for t in range(n_steps):
        runner.step(t)
    finished = runner.finish()
    ns = time.perf_counter_ns() - t0
    return ns, runner.collect(finished)


def measure(
    runners: Sequence[_Runner],
    streams: Sequence[TokenStream],
    oracles: Sequence[str],
    decodes: Sequence[str],
    repeats: int,
    bar: Any,
) -> dict[str, dict[str, Any]]:
    """Median ns/token per runner; mismatches against the oracle (§3) and against plain decode."""
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    checks: dict[str, dict[str, Any]] = {}
    for rep in range(repeats):
        # Rotate the order each repetition so drift on this shared machine hits all alike.
        for runner in runners[rep % len(runners) :] + runners[: rep % len(runners)]:
            subset = streams[: runner.max_streams] if runner.max_streams else streams
            ns, texts = time_run(runner, subset)
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
