"""detok: a multiprocess detokenizer worker pool for LLM serving.

The public API is re-exported here; names resolve lazily so that `import detok` stays cheap in
worker processes and in the scheduler (which never needs the HTTP stack).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # tokenizer layer
    "load_tokenizer": "detok.tokenizer.factory",
    "Tokenizer": "detok.tokenizer.base",
    "TokenizerLoadError": "detok.tokenizer.base",
    "SpecialTokens": "detok.tokenizer.base",
    "TokenizerInfo": "detok.tokenizer.base",
    "BaseTokenizer": "detok.tokenizer.python_backend",
    "ChatTemplateError": "detok.tokenizer.chat",
    # streaming decode
    "DecodeParams": "detok.wire.params",
    "Delta": "detok.wire.params",
    "Finish": "detok.wire.params",
    "DecodeStream": "detok.stream.decode_stream",
    # pool
    "DetokPool": "detok.pool.pool",
    "SchedulerClient": "detok.scheduler.client",
    "RequestIdInUse": "detok.scheduler.client",
    "LogprobColumns": "detok.scheduler.step_logprobs",
    "Registration": "detok.wire.to_workers",
    "EndRequest": "detok.wire.to_workers",
    "DeltaReceiver": "detok.receiver.receiver",
    "RequestDelta": "detok.receiver.receiver",
    "CurveKeys": "detok.wire.security",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'detok' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from detok.scheduler.client import RequestIdInUse, SchedulerClient
    from detok.pool.pool import DetokPool
    from detok.receiver.receiver import DeltaReceiver, RequestDelta
    from detok.wire.to_workers import EndRequest, Registration
    from detok.wire.security import CurveKeys
    from detok.scheduler.step_logprobs import LogprobColumns
    from detok.stream.decode_stream import DecodeStream
    from detok.wire.params import DecodeParams, Delta, Finish
    from detok.tokenizer.base import SpecialTokens, Tokenizer, TokenizerInfo, TokenizerLoadError
    from detok.tokenizer.chat import ChatTemplateError
    from detok.tokenizer.factory import load_tokenizer
    from detok.tokenizer.python_backend import BaseTokenizer
