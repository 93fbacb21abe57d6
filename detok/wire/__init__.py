"""Everything that crosses a socket or a pipe: messages grouped by destination, each module with its
typed decoder, plus packing of integer columns, endpoints and socket security.

    frontend  -> scheduler      to_scheduler.SchedulerRequest = GenerateRequest | Abort | AbortRange
    scheduler -> worker         to_workers.WorkerInbound      = DetokBatch | FailRequests | Replay
    worker    -> frontend       to_frontends.FrontendInbound  = DeltaBatch
    worker, supervisor -> scheduler client
                                to_scheduler.SchedulerNotice  = StopNotice | WorkerEvent | WorkerStatus
    worker   <-> supervisor     supervision.SupervisorInbound / SupervisorCommand (private pipe)

Every message is a msgspec Struct encoded as msgpack (`array_like=True`: a message is a msgpack
array, field names never travel); each socket carries one tagged union read by one typed decoder.
There is no pickle anywhere. Names resolve lazily here (`from detok.wire import DetokBatch`), so
importing one module does not pull in the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = ("to_scheduler", "to_workers", "to_frontends", "supervision", "codec", "packing")


def __getattr__(name: str) -> Any:
    for module in _MODULES:
        mod = importlib.import_module(f"detok.wire.{module}")
        if hasattr(mod, name) and not name.startswith("_"):
            value = getattr(mod, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'detok.wire' has no attribute {name!r}")
