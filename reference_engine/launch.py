"""The engine process's entry point, importable without numpy: it sets numpy's BLAS threads first.

OpenBLAS reads its thread count once, when numpy loads it, so the count is set here in the child
before anything imports numpy (the config travels as JSON for the same reason: unpickling an
`EngineConfig` would import the engine first). One thread by default: under `detok serve` the
engine shares the cores with the detok workers and the frontend, and OpenBLAS's spinning threads
lose several times their speed when a core is taken (bench/engine.py: 4 tokens/s at batch 1 with
2 threads on a busy 2-core machine, 20 with 1). `OPENBLAS_NUM_THREADS` set by the user wins.
"""

from __future__ import annotations

import json
import os
from multiprocessing.connection import Connection
from typing import Final

BLAS_THREADS: Final = 1
_BLAS_VARIABLES: Final = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def engine_config_json(model: str, log_level: str, parent_pid: int, keys: str | None = None,
                       insecure: bool = False) -> str:
    """`keys`: a `detok keygen` directory, loaded in the child (a tcp request inbox)."""
    return json.dumps({"model": model, "log_level": log_level, "parent_pid": parent_pid, "keys": keys,
                       "insecure": insecure})


def use_one_blas_thread() -> None:
    """Set numpy's BLAS threads for this process (unless the user did); before numpy loads."""
    if not any(v in os.environ for v in _BLAS_VARIABLES):
        os.environ["OPENBLAS_NUM_THREADS"] = str(BLAS_THREADS)


def child_main(config_json: str, conn: Connection) -> None:
    """multiprocessing spawn target of `detok serve --model` (see detok.serve.stack)."""
    use_one_blas_thread()
    from reference_engine.process import EngineConfig
    from reference_engine.process import child_main as engine_main

    fields = json.loads(config_json)
    if fields.get("keys"):
        from detok.wire.security import CurveKeys

        fields["keys"] = CurveKeys.load(fields["keys"])
    engine_main(EngineConfig(**fields), conn)
