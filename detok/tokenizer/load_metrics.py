"""What the factory records about each tokenizer load: a Prometheus histogram and gauge, and a
small in-process list of `TokenizerInfo` that the metrics module and the CLI can show.

The Prometheus objects live in the default registry, so the frontend's `/metrics` (multiprocess
mode included) exports them with everything else.
"""

from __future__ import annotations

import collections
import threading

from prometheus_client import Counter, Gauge, Histogram

from detok.tokenizer.base import Tokenizer, TokenizerInfo

# Loads range from milliseconds (a cached tokenizer.json) to minutes (a first Hub download).
_LOAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

LOAD_SECONDS = Histogram(
    "detok_tokenizer_load_seconds",
    "Time to load a tokenizer (detection, Hub download if any, parsing), by backend",
    ["backend"],
    buckets=_LOAD_BUCKETS,
)
VOCAB_SIZE = Gauge(
    "detok_tokenizer_vocab_size",
    "Vocabulary size (added tokens included) of the most recently loaded tokenizer, by backend",
    ["backend"],
    multiprocess_mode="mostrecent",
)
LOAD_ERRORS = Counter(
    "detok_tokenizer_load_errors",
    "Tokenizer loads that failed with TokenizerLoadError",
)

# Bounded so a long-lived process that reloads tokenizers (tests, hot reload) does not grow.
_MAX_REMEMBERED = 64
_loaded: collections.deque[TokenizerInfo] = collections.deque(maxlen=_MAX_REMEMBERED)
_lock = threading.Lock()


def record_load(tok: Tokenizer) -> TokenizerInfo:
    info = tok.info
    LOAD_SECONDS.labels(backend=info.backend).observe(info.load_seconds)
    VOCAB_SIZE.labels(backend=info.backend).set(info.vocab_size)
    with _lock:
        _loaded.append(info)
    return info


def record_load_error() -> None:
    LOAD_ERRORS.inc()


def loaded_tokenizers() -> list[TokenizerInfo]:
    """The tokenizers this process loaded, oldest first (at most the last 64)."""
    with _lock:
        return list(_loaded)
