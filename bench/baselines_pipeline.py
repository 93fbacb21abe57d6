"""Detokenizer worker processes shaped like SGLang's, the anchors of the pool benchmark.

SGLang runs one detokenizer process: the scheduler PUSHes a pickled `BatchTokenIDOut` per step over
ZMQ, the DetokenizerManager PULLs it, decodes the whole batch (`handle_batch_token_id_out`) and
PUSHes a pickled `BatchStrOut` on (`send_pyobj`). These entry points reproduce that shape with a
smaller message, so `bench/pool.py` can drive them like the real thing (pickle is the anchor's
wire format here, on purpose; detok itself never puts pickle on the wire):

    in  (driver -> worker, PULL): pickle of
        (send_time: float, rids: list[str], token_lists: list[list[int]], finished: list[bool],
         context_lens: list[int])                      # context_lens may be left out (all 0)
        token_lists[i] holds the rid's new output ids. On a rid's FIRST message it starts with
        context_lens[i] prompt ids (the prompt tail, <= 5 ids, as SGLang's read offset).
        A message of `None` stops the worker.
    out (worker -> driver, PUSH): pickle of
        (send_time, rids, texts: list[str], finished)   # send_time echoed, for latency
        The first message a worker sends is ("ready", pid), once its tokenizer is loaded.

Both workers connect their sockets (the driver binds) unless `bind=True`.

    run_sglang_style_worker:     the batch goes through `SGLangDetokenizer.step_batch`
                                 (two batch decodes per step + find_printable_text).
    run_hf_decodestream_worker:  one `HFDecodeStream` per rid, stepped id by id (vLLM v1's path).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import zmq

import detok
from bench.baselines_decode import HFDecodeStream, SGLangDetokenizer

_Handler = Callable[[list[str], list[list[int]], list[bool], Sequence[int] | None], list[str]]


def load_hf_tokenizer(source: str) -> Any:
    """The `tokenizers.Tokenizer` behind anything detok loads as a Hugging Face tokenizer
    (tokenizer.json or its folder, GGUF, Hub id); other backends are refused by name."""
    tok = detok.load_tokenizer(source)
    hf = getattr(tok, "hf_tokenizer", None)
    if hf is None:
        raise ValueError(f"{source!r} loads as a {type(tok).__name__}, not a Hugging Face tokenizer")
    return hf


def _serve(endpoints: tuple[str, str], handler: _Handler, bind: bool) -> None:
    in_endpoint, out_endpoint = endpoints
    ctx = zmq.Context(1)
    pull = ctx.socket(zmq.PULL)
    push = ctx.socket(zmq.PUSH)
    for sock in (pull, push):
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    (pull.bind if bind else pull.connect)(in_endpoint)
    (push.bind if bind else push.connect)(out_endpoint)
    try:
        push.send_pyobj(("ready", os.getpid()))
        while True:
            msg = pull.recv_pyobj()
            if msg is None:
                return
            send_time, rids, token_lists, finished = msg[:4]
            context_lens = msg[4] if len(msg) > 4 else None
            texts = handler(rids, token_lists, finished, context_lens)
            push.send_pyobj((send_time, rids, texts, finished))
    finally:
        pull.close()
        push.close()
        ctx.term()


def run_sglang_style_worker(
    endpoints: tuple[str, str], tokenizer_path: str, skip_special_tokens: bool = True, bind: bool = False
) -> None:
    """Process entry: SGLang's DetokenizerManager loop over (in, out) endpoints."""
    manager = SGLangDetokenizer(load_hf_tokenizer(tokenizer_path), skip_special_tokens)
    _serve(endpoints, manager.step_batch, bind)


class _PerRidDecodeStreams:
    def __init__(self, hf_tokenizer: Any, skip_special_tokens: bool) -> None:
        self._tok = hf_tokenizer
        self._skip = skip_special_tokens
        self._streams: dict[str, HFDecodeStream] = {}

    def __call__(
        self,
        rids: list[str],
        token_lists: list[list[int]],
        finished: list[bool],
        context_lens: Sequence[int] | None,
    ) -> list[str]:
        texts = []
        for i, rid in enumerate(rids):
            ids = token_lists[i]
            stream = self._streams.get(rid)
            if stream is None:
                n_context = context_lens[i] if context_lens else 0
                stream = HFDecodeStream(self._tok, ids[:n_context], self._skip)
                self._streams[rid] = stream
                ids = ids[n_context:]
            text = stream.step(ids)
            if finished[i]:
                text += stream.flush()
                del self._streams[rid]
            texts.append(text)
        return texts


def run_hf_decodestream_worker(
    endpoints: tuple[str, str], tokenizer_path: str, skip_special_tokens: bool = True, bind: bool = False
) -> None:
    """Process entry: one tokenizers DecodeStream per rid, same transport as the SGLang worker."""
    _serve(endpoints, _PerRidDecodeStreams(load_hf_tokenizer(tokenizer_path), skip_special_tokens), bind)
