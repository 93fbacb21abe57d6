"""The engine's bounds, named (docs/reference-engine.md lists them). Kept apart from the
engine so `detok serve --model` reads them without importing numpy or the model code."""

from __future__ import annotations

import dataclasses
from typing import Final

MAX_RUNNING_SEQUENCES: Final = 32  # the batch bound: sequences in one forward pass
MAX_KV_CACHE_BYTES: Final = 768 << 20  # all KV caches together (SmolLM2-135M: 45 KB a token, ~17k tokens)
MAX_STEP_TOKENS: Final = 512  # tokens through the model per step (decodes + prefill chunks)
MAX_WAITING: Final = 4096  # requests queued for admission; one more is refused


@dataclasses.dataclass(frozen=True)
class EngineLimits:
    max_running: int = MAX_RUNNING_SEQUENCES
    kv_cache_bytes: int = MAX_KV_CACHE_BYTES
    max_step_tokens: int = MAX_STEP_TOKENS
    max_waiting: int = MAX_WAITING
