"""The runners of bench/decode.py: one harness loop around every implementation (detok's per-stream
and batched paths, and the anchors), split out of bench/decode.py."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

import detok
from bench import _common
from bench._common import TokenStream
from bench.baselines_decode import ANCHORS, SGLangDetokenizer
from detok.wire.packing import split_text

DETOK = "detok"
DETOK_INT = "detok-int"
DETOK_INIT = "detok-init"
_ON_REQUEST = ("detok-batch+str+blob",)  # (run only when named with --impl)
IMPL_ORDER = (DETOK, DETOK_INT, DETOK_INIT, "detok-batch", "detok-batch+split", "detok-batch+str", "detok-batch+str+blob", "naive", "window", "sglang",
              "hf-decodestream")


# ---- runners: the same harness loop around every implementation ------------------------------------
class _Runner:
    """start (untimed: per-request setup) -> step(t) for each scheduler step -> finish (texts).
    start = prepare (the harness's own lists, never timed) + open (the implementation's
    per-request objects: on the clock in bench/decode.py's --per-request mode)."""

    name = ""
    max_streams: int | None = None

    def start(self, streams: Sequence[TokenStream]) -> None:
        self.prepare(streams)
        self.open(streams)

    def prepare(self, streams: Sequence[TokenStream]) -> None:
        self._singles = [[[i] for i in s.ids] for s in streams]  # prebuilt: no list churn in the loop
        self._parts: list[list[str]] = [[] for _ in streams]

    def open(self, streams: Sequence[TokenStream]) -> None:
        raise NotImplementedError

    def step(self, t: int) -> None:
        raise NotImplementedError

    def finish(self) -> list[Any]:
        raise NotImplementedError

    def collect(self, finished: list[Any]) -> list[str]:
        """The texts, from what `finish` returned (after the clock stopped)."""
        return finished


class _DetokRunner(_Runner):
    """DecodeStream, one per request from `DecodeStream.opener` (the per-request constructor an
    engine should use; `DecodeStream(...)` itself on a tree from before it), step([id])."""

    name = DETOK

    def __init__(self, tok: Any, params: Any) -> None:
        opener = getattr(detok.DecodeStream, "opener", None)
        self._make = (opener(tok, params, ignore_eos=True) if opener is not None else
                      lambda ctx: detok.DecodeStream(tok, context_ids=ctx, params=params, ignore_eos=True))

    def open(self, streams: Sequence[TokenStream]) -> None:
        self._streams = [self._make(s.context) for s in streams]

    def step(self, t: int) -> None:
        for stream, singles, parts in zip(self._streams, self._singles, self._parts):
            parts.append(stream.step(singles[t]).text)

    def finish(self) -> list[str]:
        return ["".join(p) + s.finish("length").text for s, p in zip(self._streams, self._parts)]


class _DetokIntRunner(_DetokRunner):
    """DecodeStream.step with one int id per step (no list per token)."""

    name = DETOK_INT

    def prepare(self, streams: Sequence[TokenStream]) -> None:
        super().prepare(streams)
        self._ids = [s.ids for s in streams]

    def step(self, t: int) -> None:
        for stream, ids, parts in zip(self._streams, self._ids, self._parts):
            parts.append(stream.step(ids[t]).text)


class _DetokInitRunner(_DetokIntRunner):
    """detok-int with each stream made by `DecodeStream(...)` itself (no opener): the constructor's cost."""

    name = DETOK_INIT

    def __init__(self, tok: Any, params: Any) -> None:
        self._make = lambda ctx: detok.DecodeStream(tok, context_ids=ctx, params=params, ignore_eos=True)


class _AnchorRunner(_Runner):
    def __init__(self, name: str, decoder: Any, max_streams: int | None = None) -> None:
        self.name = name
        self._cls = ANCHORS[name]
        self._decoder = decoder
        self.max_streams = max_streams

    def open(self, streams: Sequence[TokenStream]) -> None:
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

    def open(self, streams: Sequence[TokenStream]) -> None:
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
    that happens after the clock stops, for the mismatch check only. With `strs`, the step returns
    one str per row itself (`step_packed(row_texts=True, packed_text=False)`: an in-process caller's
    form, the strs alone, no packed blob; `blob` keeps the packed blob too, the step's form before
    `packed_text`: only on request, for a side-by-side comparison). The
    requests are set up and ended with `open_many` / `finish_many` (one call for the batch's new or
    ending requests, as an engine admits and ends them per step) where the table has them."""

    def __init__(self, tok: Any, params: Any, table_cls: type, split: bool = False, strs: bool = False,
                 blob: bool = False) -> None:
        self._tok, self._params, self._table_cls, self._split, self._strs, self._blob = tok, params, table_cls, split, strs, blob
        self.name = ("detok-batch+str+blob" if blob else "detok-batch+str") if strs else "detok-batch+split" if split else "detok-batch"

    def prepare(self, streams: Sequence[TokenStream]) -> None:
        super().prepare(streams)
        # one table per runner, its tables built before any clock (as a worker's before it is ready);
        # every request of a run is finished (closed) at its end
        if getattr(self, "_table", None) is None:
            self._table = self._table_cls(self._tok)
        n = len(streams)
        # Columns as the worker gets them off the wire: packed little-endian rids, starts, ids.
        self._rids = np.arange(n, dtype="<u8").tobytes()
        self._rid_list = list(range(n))
        self._prompts = [s.context for s in streams]  # (the engine's list of the step's prompts)
        self._many = hasattr(self._table, "open_many")  # (a tree from before the batched set-up: one by one)
        # (a tree from before `packed_text`: the strs and the blob)
        self._strs_only = ({"packed_text": False} if not self._blob and "packed_text" in inspect.signature(self._table.step_packed).parameters
                           else {})
        self._columns = [np.array(col, dtype="<u4").tobytes() for col in zip(*(s.ids for s in streams))]
        self._starts = [np.full(n, t, dtype="<u4").tobytes() for t in range(len(self._columns))]
        self._out: list[Any] = []

    def open(self, streams: Sequence[TokenStream]) -> None:
        if self._many:  # a step's new requests set up together, as an engine admits them
            self._table.open_many(self._rid_list, self._prompts, self._params, ignore_eos=True)
            return
        for rid, s in enumerate(streams):
            self._table.open(rid, s.context, self._params, ignore_eos=True)

    def step(self, t: int) -> None:
        if self._strs:
            self._out.append(self._table.step_packed(self._rids, self._starts[t], b"", self._columns[t], row_texts=True,
                                                     **self._strs_only).texts)
            return
        out = self._table.step_packed(self._rids, self._starts[t], b"", self._columns[t])
        self._out.append(split_text(out.text, out.lengths) if self._split else out)

    def finish(self) -> list[Any]:
        if self._many:
            return [end[0] for end in self._table.finish_many(self._rid_list, "length")]
        return [self._table.finish(rid, "length")[0] for rid in range(len(self._parts))]

    def collect(self, tails: list[Any]) -> list[str]:
        for out in self._out:
            texts = out if self._split or self._strs else split_text(out.text, out.lengths)
            for parts, text in zip(self._parts, texts):
                parts.append(text)
        return ["".join(p) + tail for p, tail in zip(self._parts, tails)]


def _detok_batch_runners(tok: Any, params: Any) -> list[_Runner]:
    try:
        from detok.stream.table import StreamTable
    except ImportError:
        _common.log("detok has no batched decode path (detok.stream.table.StreamTable): detok-batch skipped")
        return []
    return [_DetokBatchRunner(tok, params, StreamTable), _DetokBatchRunner(tok, params, StreamTable, split=True),
            _DetokBatchRunner(tok, params, StreamTable, strs=True), _DetokBatchRunner(tok, params, StreamTable, strs=True, blob=True)]


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
        _DetokIntRunner(tok, params),
        _DetokInitRunner(tok, params),
        *_detok_batch_runners(tok, params),
        _AnchorRunner("naive", decoder, max_streams=naive_streams),
        _AnchorRunner("window", decoder),
        _SGLangRunner(decoder),
        _AnchorRunner("hf-decodestream", hf) if hf is not None else None,
    ]
    if hf is None:
        _common.log(f"{tok!r} is not a Hugging Face tokenizer: no hf-decodestream anchor")
    return [r for r in runners if r is not None and (r.name in only if only is not None else r.name not in _ON_REQUEST)]
