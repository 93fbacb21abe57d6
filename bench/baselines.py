"""Anchors for detok's benchmarks: other stacks' incremental detokenizers, re-implemented from their
published algorithms (never copied), and worker processes shaped like SGLang's detokenizer.

The bench scripts run as `python bench/<script>.py`, so `bench/` is on sys.path and its modules
import each other by plain name (`from baselines import SGLangDetokenizer`); tests put `bench/` on
sys.path the same way.

- `baselines_decode`: NaiveRedecode, WindowDiff (TGI / vLLM slow), SGLangDetokenizer (+ the
  one-request SGLangIncremental), HFDecodeStream (tokenizers' DecodeStream as vLLM v1 drives it).
- `baselines_pipeline`: run_sglang_style_worker, run_hf_decodestream_worker (ZMQ + pickle, the
  message shapes are in that module's docstring).
"""

from baselines_decode import (
    ANCHORS,
    HFDecodeStream,
    NaiveRedecode,
    SGLangDetokenizer,
    SGLangIncremental,
    WindowDiff,
    find_printable_text,
)
from baselines_pipeline import load_hf_tokenizer, run_hf_decodestream_worker, run_sglang_style_worker

__all__ = [
    "ANCHORS",
    "HFDecodeStream",
    "NaiveRedecode",
    "SGLangDetokenizer",
    "SGLangIncremental",
    "WindowDiff",
    "find_printable_text",
    "load_hf_tokenizer",
    "run_hf_decodestream_worker",
    "run_sglang_style_worker",
]
