"""Anchors for detok's benchmarks: other stacks' incremental detokenizers, re-implemented from their
published algorithms (never copied), and worker processes shaped like SGLang's detokenizer.

`bench` is a package: scripts run as `python bench/<script>.py` (they put the repo root on
sys.path) or `python -m bench.<script>`, and import each other as `bench.<module>`.

- `baselines_decode`: NaiveRedecode, WindowDiff (TGI / vLLM slow), SGLangDetokenizer (+ the
  one-request SGLangIncremental), HFDecodeStream (tokenizers' DecodeStream as vLLM v1 drives it).
- `baselines_pipeline`: run_sglang_style_worker, run_hf_decodestream_worker (ZMQ + pickle, the
  message shapes are in that module's docstring).
"""

from bench.baselines_decode import (
    ANCHORS,
    HFDecodeStream,
    NaiveRedecode,
    SGLangDetokenizer,
    SGLangIncremental,
    WindowDiff,
    find_printable_text,
)
from bench.baselines_pipeline import load_hf_tokenizer, run_hf_decodestream_worker, run_sglang_style_worker

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
