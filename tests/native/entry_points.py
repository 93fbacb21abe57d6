"""The one table of detok's compiled code that the packaging, sanitizer and fuzz checks read.

`NATIVE` names every extension module (as setup.py builds it) and the entry points its Python
callers use; `COMPILED_PATH_TESTS` the test files that drive those entry points through their
callers (what `make sanitize` runs under AddressSanitizer and UBSan). Moving or renaming a module
changes this file and setup.py only: `test_native_table.py` fails until the two agree.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]

# module -> its entry points ("Type.method" for a method of a type the module defines)
NATIVE: Final[dict[str, tuple[str, ...]]] = {
    "detok._native._plainstep": ("step_packed", "split_text", "group_rows", "decode_utf8", "RidMap.put", "RidMap.get",
                                "RidMap.pop", "PlainOpener.open", "PlainOpener.finish", "PlainOpener.open_many",
                                "PlainOpener.finish_many"),
    "detok._native._streamcore": ("configure_stream", "whole_tail", "StreamCore.step", "StreamCore.finish",
                                 "StreamCore._open_plain", "StreamMaker"),
    "detok._native._tokenstrings": ("gather",),
    "detok._native._chatentries": ("render",),
    "detok._native._chatlogprobs": ("render",),
    "detok._native._chunkpush": ("frame_text", "push_rows", "idle_for_push", "TextPusher", "StreamFields", "TypedFields"),
    "detok._native._logprobrows": ("rows",),
    "detok._native._latency": ("Buckets", "Buckets.observe", "Buckets.take", "TokenClock", "TokenClock.text"),
}

COMPILED_PATH_TESTS: Final = (
    "tests/native",
    "tests/stream",
    "tests/worker/test_logprobs_worker.py",
    "tests/worker/test_chat_entries.py",
    "tests/worker/test_typed_held.py",
    "tests/receiver",
    "tests/frontend/test_chunkpush_c.py",
    "tests/frontend/test_chunk_push.py",
    "tests/frontend/test_direct_rows.py",
    "tests/frontend/test_chat_logprobs_json.py",
    "tests/frontend/test_frontend_units.py",
    "tests/wire/test_protocol.py",
    "tests/worker/test_worker_core.py",
    "tests/worker/test_typed_fast.py",
    "tests/test_metrics.py",
)


def setup_extensions(setup_py: Path = ROOT / "setup.py") -> dict[str, list[str]]:
    """setup.py's extensions, read from its source (not run): module name -> its C sources."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension":
            name, sources = (ast.literal_eval(a) for a in node.args[:2])
            found[name] = list(sources)
    return found


def entry_point(name: str) -> Any:
    """The object of a table entry: "module:attr" or "module:Type.method"."""
    module_name, _, attr = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def native_modules() -> list[ModuleType]:
    return [importlib.import_module(m) for m in NATIVE]
