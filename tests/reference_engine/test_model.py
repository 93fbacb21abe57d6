"""The numpy forward pass: pinned greedy answers, the same logits however tokens are grouped into
passes and batches, and agreement with a plain per-token reference written from the Hugging Face
Llama definition (un-permuted Q/K, rotate-half RoPE, explicit loops over heads)."""

from __future__ import annotations

import numpy as np
import pytest

from reference_engine.model import LlamaModel, Segment
from tests.reference_engine.conftest import chat_ids, needs_model

pytestmark = [pytest.mark.timeout(300), needs_model]


def greedy(model: LlamaModel, ids: list[int], n: int, eos: frozenset[int]) -> list[int]:
    cache = model.new_cache(len(ids) + n)
    logits = model.forward([Segment(cache, ids)])
    out: list[int] = []
    while len(out) < n:
        out.append(int(logits[0].argmax()))
        if out[-1] in eos:
            break
        logits = model.forward([Segment(cache, [out[-1]])])
    return out


def test_greedy_answers_are_pinned(model, tok, model_parts):
    eos = model_parts[1]
    france = greedy(model, chat_ids(tok, "What is the capital of France?"), 12, eos)
    assert france == [504, 3575, 282, 4649, 314, 7042, 30, 2]
    assert tok.decode(france) == "The capital of France is Paris."
    count = greedy(model, chat_ids(tok, "Count from one to five."), 12, eos)
    assert count == [33, 30, 216, 33, 198, 34, 30, 216, 34, 198, 35, 30]
    fox = greedy(model, tok.encode("The quick brown fox", add_special_tokens=False), 12, eos)
    assert fox == [351, 253, 2365, 6354, 7012, 30, 198, 198, 504, 2798, 6330, 314]


def test_logits_do_not_depend_on_grouping(model, tok):
    """A prompt in one pass, in chunks, token by token, or batched with another sequence: the same
    logits at its last token (to float32 rounding)."""
    a = tok.encode("Paris is the capital and largest city of France.", add_special_tokens=False)
    b = tok.encode("Numbers:", add_special_tokens=False)
    whole = model.forward([Segment(model.new_cache(len(a)), a)])[0]
    cache = model.new_cache(len(a))
    model.forward([Segment(cache, a[:3])])
    chunked = model.forward([Segment(cache, a[3:])])[0]
    cache = model.new_cache(len(a))
    for t in a:
        stepwise = model.forward([Segment(cache, [t])])[0]
    batched = model.forward([Segment(model.new_cache(len(b)), b), Segment(model.new_cache(len(a)), a)])[1]
    for other in (chunked, stepwise, batched):
        np.testing.assert_allclose(other, whole, rtol=0, atol=2e-3 * np.abs(whole).max())
        assert other.argmax() == whole.argmax()


def _reference_logits(model: LlamaModel, ids: list[int]) -> np.ndarray:
    """Logits at the last token, one token at a time, per head, in float64, from the HF layout:
    the GGUF converter interleaved each head's Q/K rows; undo that and rotate halves instead."""
    cfg = model.cfg
    hd, half = cfg.head_dim, cfg.head_dim // 2
    unpermute = np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])  # GGUF row -> HF row order
    keys: list[list[list[np.ndarray]]] = [[[] for _ in range(cfg.n_kv_heads)] for _ in range(cfg.n_layers)]
    values: list[list[list[np.ndarray]]] = [[[] for _ in range(cfg.n_kv_heads)] for _ in range(cfg.n_layers)]

    def norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x) + cfg.norm_eps) * w

    def rope(v: np.ndarray, pos: int) -> np.ndarray:  # HF rotate_half
        freq = cfg.rope_base ** (-np.arange(half) * 2 / hd) * pos
        rotated = np.concatenate([-v[half:], v[:half]])
        return v * np.cos(np.concatenate([freq, freq])) + rotated * np.sin(np.concatenate([freq, freq]))

    for pos, token in enumerate(ids):
        x = model.embedding[token].astype(np.float64)
        for li, w in enumerate(model.layers):
            h = norm(x, w.attn_norm)
            qkv = w.wqkv.astype(np.float64) @ h  # weights are (out, in)
            q = qkv[: cfg.dim].reshape(cfg.n_heads, hd)[:, unpermute]
            k = qkv[cfg.dim : cfg.dim + cfg.kv_dim].reshape(cfg.n_kv_heads, hd)[:, unpermute]
            v = qkv[cfg.dim + cfg.kv_dim :].reshape(cfg.n_kv_heads, hd)
            for kv in range(cfg.n_kv_heads):
                keys[li][kv].append(rope(k[kv], pos))
                values[li][kv].append(v[kv])
            heads = []
            for head in range(cfg.n_heads):
                kv = head * cfg.n_kv_heads // cfg.n_heads
                scores = np.array([rope(q[head], pos) @ key for key in keys[li][kv]]) / np.sqrt(hd)
                weights = np.exp(scores - scores.max())
                heads.append((weights / weights.sum()) @ np.array(values[li][kv]))
            x = x + w.wo @ np.concatenate(heads)
            gate_up = w.w_gate_up.astype(np.float64) @ norm(x, w.ffn_norm)
            gate, up = gate_up[: cfg.ffn_dim], gate_up[cfg.ffn_dim :]
            x = x + w.w_down @ (gate / (1 + np.exp(-gate)) * up)
    return model.output.astype(np.float64) @ norm(x, model.norm)


def test_forward_matches_a_plain_reference(model, tok):
    ids = tok.encode("The capital of France is", add_special_tokens=False)
    ours = model.forward([Segment(model.new_cache(len(ids)), ids)])[0]
    reference = _reference_logits(model, ids)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-3 * np.abs(reference).max())
    assert ours.argmax() == reference.argmax() == tok.encode(" Paris", add_special_tokens=False)[0]


def test_the_model_knows_english(model, tok):
    """Teacher-forced perplexity of a plain English sentence is low (a wrong RoPE layout doubles it)."""
    ids = tok.encode("The quick brown fox jumps over the lazy dog. It was a sunny day in the park, and "
                     "children were playing on the grass.", add_special_tokens=False)
    logits = model.forward([Segment(model.new_cache(len(ids)), ids)], every_position=True).astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    nll = -logprobs[np.arange(len(ids) - 1), ids[1:]].sum()
    assert np.exp(nll / (len(ids) - 1)) < 25  # 19.2 measured; the half-rotation RoPE gives 36.7


def test_a_bad_gguf_is_a_model_format_error(tmp_path):
    """Another architecture, a missing tensor, tensor data cut short: each a ModelFormatError
    naming it (read before any forward pass)."""
    import gguf

    from reference_engine.model import ModelFormatError

    def write(arch: str, **tensors: np.ndarray) -> bytes:
        path = tmp_path / "m.gguf"
        writer = gguf.GGUFWriter(path, arch=arch)
        for name, value in tensors.items():
            writer.add_tensor(name, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()

    cases = [(write("gpt2"), "this GGUF is 'gpt2'"), (write("llama"), "no tensor 'token_embd.weight'")]
    whole = write("llama", **{"token_embd.weight": np.ones((64, 32), np.float32)})
    cases.append((whole[:-100], "truncated: tensor 'token_embd.weight'"))
    for data, reason in cases:
        (tmp_path / "case.gguf").write_bytes(data)
        with pytest.raises(ModelFormatError, match=reason):
            LlamaModel.load(tmp_path / "case.gguf")
