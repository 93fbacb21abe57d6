"""A Llama-family decoder in numpy: GGUF weights, one batched forward pass, a KV cache per sequence.

This is a *reference* engine for detok's tests and demos, not a fast one: float32 matmuls through
numpy's BLAS. Weights are dequantised once at load (the choice: speed over memory; SmolLM2-135M is
135 M parameters, ~540 MB as float32, versus ~100 MB kept quantised and dequantised per use at
several times the cost per step). Q/K/V and gate/up are fused so a layer is four matmuls for the
whole batch; weights stay (out, in) as GGUF stores them (see `_mm`).

GGUF conventions followed (llama.cpp's, not Hugging Face's): a 2-D tensor's data is laid out
`(ne1, ne0)` = (out, in); the converter permuted the Q and K rows so RoPE rotates *adjacent*
pairs (x[2i], x[2i+1]) by `pos * base^(-2i/head_dim)`; attention heads share K/V heads in groups
of `n_heads // n_kv_heads` (head h reads KV head h // group); without `output.weight` the output
projection is the token embedding (tied).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

F32 = np.float32


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    context_length: int
    rope_base: float
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token of one sequence holds (K and V, every layer, float32)."""
        return self.n_layers * 2 * self.kv_dim * 4


class LayerWeights(NamedTuple):
    attn_norm: np.ndarray  # (dim,)
    wqkv: np.ndarray  # (dim + 2 * kv_dim, dim): Q, K, V fused; (out, in) as GGUF stores them, see _mm
    wo: np.ndarray  # (dim, dim)
    ffn_norm: np.ndarray  # (dim,)
    w_gate_up: np.ndarray  # (2 * ffn_dim, dim): gate then up
    w_down: np.ndarray  # (dim, ffn_dim)


class ModelFormatError(ValueError):
    """The GGUF file is not a Llama-family model this engine runs."""


class KVCache:
    """One sequence's keys and values, `(layers, kv_heads, capacity, head_dim)` each.

    The capacity is reserved up front (prompt + max_tokens, at most the context) with `np.empty`:
    the pages of a large buffer are only backed by memory once written, so what a sequence costs is
    what it has used - the engine's memory bound counts `length`, never `capacity`."""

    __slots__ = ("k", "v", "length")

    def __init__(self, cfg: LlamaConfig, capacity: int) -> None:
        shape = (cfg.n_layers, cfg.n_kv_heads, capacity, cfg.head_dim)
        self.k = np.empty(shape, F32)
        self.v = np.empty(shape, F32)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[2]


class Segment(NamedTuple):
    """One sequence's part of a forward pass: `tokens` go in at positions cache.length onward."""

    cache: KVCache
    tokens: Sequence[int]


def _field(metadata: dict[str, object], key: str) -> object:
    if key not in metadata:
        raise ModelFormatError(f"the GGUF file has no {key!r}")
    return metadata[key]


class LlamaModel:
    def __init__(self, cfg: LlamaConfig, embedding: np.ndarray, layers: list[LayerWeights], norm: np.ndarray,
                 output: np.ndarray) -> None:
        self.cfg = cfg
        self.embedding = embedding  # (vocab, dim)
        self.layers = layers
        self.norm = norm
        self.output = output  # (vocab, dim); the embedding itself when tied
        half = cfg.head_dim // 2
        inv_freq = cfg.rope_base ** (-np.arange(half, dtype=np.float64) * 2 / cfg.head_dim)
        angles = np.outer(np.arange(cfg.context_length, dtype=np.float64), inv_freq)
        self._cos = np.cos(angles).astype(F32)  # (context, head_dim / 2)
        self._sin = np.sin(angles).astype(F32)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LlamaModel:
        """Read and dequantise a Llama-family GGUF (any quantisation `gguf` can dequantise)."""
        import gguf

        from detok.tokenizer.gguf_metadata import read_gguf_layout

        # detok's header reader, not gguf.GGUFReader: the latter builds numpy views of every
        # vocabulary string, which is most of a small model's load time
        metadata, infos = read_gguf_layout(path)
        arch = _field(metadata, "general.architecture")
        if arch != "llama":
            raise ModelFormatError(f"the reference engine runs Llama-family models; this GGUF is {arch!r}")

        def meta(name: str, default: object = None) -> object:
            key = f"llama.{name}"
            if default is not None and key not in metadata:
                return default
            return _field(metadata, key)

        tensors = {t.name: t for t in infos}
        data = np.memmap(path, dtype=np.uint8, mode="r")

        def weight(name: str) -> np.ndarray:
            t = tensors.get(name)
            if t is None:
                raise ModelFormatError(f"the GGUF file has no tensor {name!r}")
            kind = gguf.GGMLQuantizationType(t.ggml_type)
            shape = gguf.quant_shape_to_byte_shape(tuple(reversed(t.dims)), kind)  # rows of bytes
            size = int(np.prod(shape))
            if t.offset + size > len(data):
                raise ModelFormatError(f"the GGUF file is truncated: tensor {name!r} ends past its end")
            raw = data[t.offset : t.offset + size].reshape(shape)
            return np.ascontiguousarray(gguf.quants.dequantize(raw, kind), dtype=F32)

        embedding = weight("token_embd.weight")
        n_heads = int(meta("attention.head_count"))  # type: ignore[arg-type]
        cfg = LlamaConfig(
            n_layers=int(meta("block_count")),  # type: ignore[arg-type]
            dim=int(meta("embedding_length")),  # type: ignore[arg-type]
            n_heads=n_heads,
            n_kv_heads=int(meta("attention.head_count_kv", n_heads)),  # type: ignore[arg-type]
            ffn_dim=int(meta("feed_forward_length")),  # type: ignore[arg-type]
            vocab_size=embedding.shape[0],
            context_length=int(meta("context_length")),  # type: ignore[arg-type]
            rope_base=float(meta("rope.freq_base", 10000.0)),  # type: ignore[arg-type]
            norm_eps=float(meta("attention.layer_norm_rms_epsilon")),  # type: ignore[arg-type]
        )
        if embedding.shape != (cfg.vocab_size, cfg.dim) or cfg.dim % cfg.n_heads or cfg.n_heads % cfg.n_kv_heads:
            raise ModelFormatError(f"inconsistent shapes: embedding {embedding.shape}, {cfg}")
        layers = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            wqkv = np.concatenate([weight(p + "attn_q.weight"), weight(p + "attn_k.weight"),
                                   weight(p + "attn_v.weight")])
            w_gate_up = np.concatenate([weight(p + "ffn_gate.weight"), weight(p + "ffn_up.weight")])
            layers.append(LayerWeights(
                attn_norm=weight(p + "attn_norm.weight"),
                wqkv=wqkv,
                wo=weight(p + "attn_output.weight"),
                ffn_norm=weight(p + "ffn_norm.weight"),
                w_gate_up=w_gate_up,
                w_down=weight(p + "ffn_down.weight"),
            ))
        output = weight("output.weight") if "output.weight" in tensors else embedding
        return cls(cfg, embedding, layers, weight("output_norm.weight"), output)

    # ---- forward ------------------------------------------------------------------------------
    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.cfg, min(max(capacity, 1), self.cfg.context_length))

    def forward(self, segments: Sequence[Segment], every_position: bool = False) -> np.ndarray:
        """Run every segment's new tokens through the model in one pass (one matmul per weight for
        all of them), append their keys/values to each cache, and return the logits at each
        segment's last new token: `(len(segments), vocab)` float32 (`every_position`: at every new
        token, `(total new tokens, vocab)`)."""
        cfg = self.cfg
        counts = [len(s.tokens) for s in segments]
        starts = [s.cache.length for s in segments]
        for s, n in zip(segments, counts):
            if n < 1 or s.cache.length + n > s.cache.capacity:
                raise ValueError(f"a segment of {n} tokens does not fit its cache "
                                 f"({s.cache.length} of {s.cache.capacity} used)")
        ids = np.fromiter((t for s in segments for t in s.tokens), dtype=np.int64, count=sum(counts))
        positions = np.concatenate([np.arange(a, a + n) for a, n in zip(starts, counts)])
        cos, sin = self._cos[positions][:, None, :], self._sin[positions][:, None, :]
        bounds = np.cumsum([0, *counts])
        x = self.embedding[ids]  # (N, dim)
        hd, nq, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        for li, w in enumerate(self.layers):
            qkv = _mm(self._rms_norm(x, w.attn_norm), w.wqkv)
            q = _rope(qkv[:, : cfg.dim].reshape(-1, nq, hd), cos, sin)
            k = _rope(qkv[:, cfg.dim : cfg.dim + cfg.kv_dim].reshape(-1, nkv, hd), cos, sin)
            v = qkv[:, cfg.dim + cfg.kv_dim :].reshape(-1, nkv, hd)
            attn = np.empty((len(ids), cfg.dim), F32)
            for si, s in enumerate(segments):
                a, b = bounds[si], bounds[si + 1]
                attn[a:b] = self._attend(s.cache, li, starts[si], q[a:b], k[a:b], v[a:b])
            x = x + _mm(attn, w.wo)
            gate_up = _mm(self._rms_norm(x, w.ffn_norm), w.w_gate_up)
            gate, up = gate_up[:, : cfg.ffn_dim], gate_up[:, cfg.ffn_dim :]
            x = x + _mm(gate / (1.0 + np.exp(-gate)) * up, w.w_down)  # SwiGLU
        for s, n in zip(segments, counts):
            s.cache.length += n
        last = x if every_position else x[bounds[1:] - 1]
        return _mm(self._rms_norm(last, self.norm), self.output)

    def _rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        scale = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.norm_eps)
        return (x * scale * weight).astype(F32, copy=False)

    def _attend(self, cache: KVCache, layer: int, start: int, q: np.ndarray, k: np.ndarray,
                v: np.ndarray) -> np.ndarray:
        """Causal attention of `n` new tokens (positions start..start+n-1) over the cache plus
        themselves; q (n, heads, hd), k/v (n, kv_heads, hd) -> (n, heads * hd)."""
        n, cfg = q.shape[0], self.cfg
        end = start + n
        cache.k[layer, :, start:end] = k.transpose(1, 0, 2)
        cache.v[layer, :, start:end] = v.transpose(1, 0, 2)
        keys, values = cache.k[layer, :, :end], cache.v[layer, :, :end]  # (kv_heads, end, hd)
        group = cfg.n_heads // cfg.n_kv_heads
        # (kv_heads, group * n, hd): the query heads of each KV head, all positions
        qg = q.reshape(n, cfg.n_kv_heads, group, cfg.head_dim).transpose(1, 2, 0, 3).reshape(cfg.n_kv_heads, group * n, -1)
        scores = (qg @ keys.transpose(0, 2, 1)) * F32(1.0 / np.sqrt(cfg.head_dim))  # (kv_heads, group*n, end)
        if n > 1:  # new token i sees cache positions <= start + i
            future = np.arange(end)[None, :] > (start + np.arange(n))[:, None]  # (n, end)
            scores = scores.reshape(cfg.n_kv_heads, group, n, end)
            scores[:, :, future] = -np.inf
            scores = scores.reshape(cfg.n_kv_heads, group * n, end)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        out = scores @ values  # (kv_heads, group * n, hd)
        return out.reshape(cfg.n_kv_heads, group, n, cfg.head_dim).transpose(2, 0, 1, 3).reshape(n, -1)


def _mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (n, in) times w (out, in) transposed -> (n, out). Computed as w @ x.T: with OpenBLAS, a
    small batch against a wide weight is up to 2x faster that way round than x @ w.T (measured
    at n = 2..32 on this machine; equal at n = 1)."""
    return (w @ x.T).T


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate adjacent pairs (llama.cpp's "normal" RoPE, for GGUF's permuted Q/K); x (n, heads, hd)."""
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
