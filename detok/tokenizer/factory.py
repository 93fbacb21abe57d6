"""`load_tokenizer`: one entry point for every tokenizer source detok supports.

A file's format is read from its first bytes (JSON, GGUF magic, tiktoken rank lines, SentencePiece
protobuf), never guessed from its name alone, so a renamed file still loads and a wrong one fails
clearly. Backends are imported only when used: a missing optional dependency is a load error that
names the package, and `import detok` stays cheap. Every failure is one `TokenizerLoadError`.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from detok.tokenizer.base import Tokenizer, TokenizerLoadError
from detok.tokenizer.load_metrics import loaded_tokenizers, record_load, record_load_error

__all__ = ["BACKENDS", "load_tokenizer", "loaded_tokenizers"]

BACKENDS = ("huggingface", "tiktoken", "sentencepiece", "gguf", "mistral", "python", "mock")
_ALIASES = {"hf": "huggingface", "tokenizers": "huggingface", "spm": "sentencepiece", "tekken": "mistral"}

_BACKEND_MODULES = {
    "tiktoken": "detok.tokenizer.tiktoken_backend",
    "sentencepiece": "detok.tokenizer.spm",
    "gguf": "detok.tokenizer.gguf_backend",
    "mistral": "detok.tokenizer.mistral",
    "python": "detok.tokenizer.python_backend",
    "mock": "detok.tokenizer.mock",
}
_LOADERS = {
    "tiktoken": "load_tiktoken",
    "sentencepiece": "load_sentencepiece",
    "gguf": "load_gguf",
    "mistral": "load_mistral",
    "mock": "load_mock",
}
_INSTALL_HINTS = {"mistral_common": "pip install 'detok[mistral]'"}

_HEAD_BYTES = 4096
_GGUF_MAGIC = b"GGUF"  # checked inline: importing the gguf package costs half a second
_JSON_START = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*[{\[]")
# tokenizers writes "version" first: such a file is known without parsing megabytes of JSON twice
_TOKENIZERS_JSON_START = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"version"\s*:\s*"')
_PYTHON_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_MISTRAL_VERSIONED = re.compile(r"\.model\.v\d+\w*$")

# Which file of a folder is its tokenizer, best first. None means sniff the content: a
# tokenizer.model may be SentencePiece or, like Llama 3's, tiktoken ranks.
_FOLDER_RULES: tuple[tuple[str, str | None], ...] = (
    ("tokenizer.json", "huggingface"),
    ("tekken.json", "mistral"),
    ("tokenizer.model.v*", "mistral"),
    ("tokenizer.model", None),
    ("*.tiktoken", "tiktoken"),
    ("*.model", None),
    ("*.gguf", "gguf"),
)
_SNIFFED_BACKENDS = ("tiktoken", "sentencepiece")


def load_tokenizer(
    source: str | os.PathLike[str] | None = None,
    backend: str | None = None,
    *,
    chat_template: str | os.PathLike[str] | None = None,
    revision: str | None = None,
    token: str | None = None,
    **options: Any,
) -> Tokenizer:
    """Load a tokenizer from a file, a folder, a tiktoken name, 'module:Class', 'mock' or a Hub id.

    `backend` forces one of BACKENDS instead of detecting it. `chat_template` (a file or a template
    string) replaces the tokenizer's own. `revision` and `token` are for Hub downloads. Other
    keywords go to the backend. The load time lands in `tok.load_seconds` and the load metrics.
    """
    label = os.fspath(source) if source is not None else _python_label(options)
    start = time.perf_counter()
    try:
        tok = _load(source, _backend_name(backend, label), revision, token, options)
        if chat_template is not None:
            tok.set_chat_template(_read_chat_template(chat_template, label))
    except TokenizerLoadError:
        record_load_error()
        raise
    except Exception as e:  # a backend's own failure: keep its message, give it the one error type
        record_load_error()
        raise TokenizerLoadError(label, f"{type(e).__name__}: {e}") from e
    tok.load_seconds = time.perf_counter() - start
    record_load(tok)
    return tok


def _backend_name(backend: str | None, label: str) -> str | None:
    if backend is None:
        return None
    name = _ALIASES.get(backend.lower(), backend.lower())
    if name not in BACKENDS:
        raise TokenizerLoadError(label, f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return name


def _python_label(options: dict[str, Any]) -> str:
    module, cls = options.get("module"), options.get("cls")
    return f"{module}:{cls}" if module or cls else "<no source>"


def _load(
    source: str | os.PathLike[str] | None,
    backend: str | None,
    revision: str | None,
    token: str | None,
    options: dict[str, Any],
) -> Tokenizer:
    if backend == "mock" or (backend is None and source == "mock"):
        return _call("mock", "mock", **options)
    if backend == "python":
        return _load_python(source, options)
    if source is None:
        raise TokenizerLoadError(
            "<no source>", "no source given; only backend='python' (with module=, cls=) or 'mock' need none"
        )
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.exists():
        return _load_path(path, backend, text, options)
    if backend is None and _PYTHON_SPEC.fullmatch(text):
        return _load_python(text, options)
    from detok.tokenizer.hub import download_tokenizer_files, looks_like_hub_id

    if looks_like_hub_id(text):
        folder = download_tokenizer_files(text, revision=revision, token=token)
        tok = _load_path(folder, backend, text, options)
        tok.source = text  # the repository names it better than the cache snapshot path
        return tok
    if backend == "tiktoken" or (backend is None and _sniff("tiktoken", "is_tiktoken_name", text)):
        return _call("tiktoken", text, text, **options)
    if backend is not None or os.sep in text or "." in Path(text).name:
        raise TokenizerLoadError(text, "no such file or directory")
    raise TokenizerLoadError(
        text, "not an existing path, a tiktoken encoding or model name, a 'module:Class' or a Hub id 'org/name'"
    )


def _load_python(source: str | os.PathLike[str] | None, options: dict[str, Any]) -> Tokenizer:
    """`source` is the class spec ('pkg.module:Class') unless module=/cls= name it; then a model path."""
    spec = options.pop("spec", None)
    model_path = options.pop("model_path", None)
    if source is not None:
        text = os.fspath(source)
        naming_given = spec is not None or options.get("module") is not None
        if not naming_given and _PYTHON_SPEC.fullmatch(text) and not os.path.exists(text):
            spec = text
        elif model_path is None:
            model_path = text
    module = _backend_module("python", str(source or _python_label(options)))
    return module.load_python(spec=spec, model_path=model_path, **options)


def _load_path(path: Path, backend: str | None, label: str, options: dict[str, Any]) -> Tokenizer:
    if backend == "python":
        return _load_python(path, options)
    file, kind = _pick_in_folder(path, backend, label) if path.is_dir() else (path, None)
    kind = backend or kind or _detect_file(file, label)
    if kind == "huggingface":
        from detok.tokenizer.hf import HFTokenizer

        if options:
            raise TokenizerLoadError(label, f"the huggingface backend takes no options (got {sorted(options)})")
        return HFTokenizer.from_path(file, source=label)
    return _call(kind, label, str(file), **options)


def _pick_in_folder(folder: Path, backend: str | None, label: str) -> tuple[Path, str | None]:
    """The folder's tokenizer file and its kind (None: sniff it), honouring a forced backend."""
    for pattern, kind in _FOLDER_RULES:
        if backend is not None and kind != backend and not (kind is None and backend in _SNIFFED_BACKENDS):
            continue
        matches = sorted(p for p in folder.glob(pattern) if p.is_file())
        if len(matches) > 1:
            names = ", ".join(p.name for p in matches)
            raise TokenizerLoadError(label, f"{folder} holds several candidate files ({names}): pass one of them")
        if matches:
            # tokenizers' loader wants the folder, so it also reads the config and template files
            return (folder if kind == "huggingface" else matches[0]), kind
    present = sorted(p.name for p in folder.iterdir())[:12]
    wanted = f"{backend} tokenizer file" if backend else "tokenizer file"
    raise TokenizerLoadError(label, f"no {wanted} in folder {folder} (it holds: {', '.join(present) or 'nothing'})")


def _detect_file(path: Path, label: str) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError as e:
        raise TokenizerLoadError(label, f"cannot read {path}: {e.strerror or e}") from None
    if not head:
        raise TokenizerLoadError(label, f"{path.name} is empty")
    if head.startswith(_GGUF_MAGIC):
        return "gguf"
    if _MISTRAL_VERSIONED.search(path.name):
        return "mistral"
    if _TOKENIZERS_JSON_START.match(head):
        return "huggingface"
    if _JSON_START.match(head):
        return _json_kind(path, label)
    if _sniff("tiktoken", "looks_like_tiktoken_file", head):
        return "tiktoken"
    if _sniff("sentencepiece", "looks_like_sentencepiece", head):
        return "sentencepiece"
    raise TokenizerLoadError(label, f"{path.name} is not a tokenizer file detok recognises (it starts {head[:16]!r})")


def _json_kind(path: Path, label: str) -> str:
    from detok.tokenizer.hf import read_json

    obj = read_json(path, label)  # a clear error for corrupt JSON
    if isinstance(obj.get("model"), dict):  # tokenizers' serialisation always holds its model
        return "huggingface"
    if _sniff("mistral", "looks_like_tekken", obj):
        return "mistral"
    raise TokenizerLoadError(label, f"{path.name} is JSON but neither a tokenizers file nor a Tekken file")


def _sniff(backend: str, predicate: str, value: Any) -> bool:
    """Ask a backend whether `value` is its format; a backend that cannot load says no."""
    try:
        module = importlib.import_module(_BACKEND_MODULES[backend])
    except ImportError:
        return False
    return bool(getattr(module, predicate)(value))


def _backend_module(backend: str, label: str) -> ModuleType:
    try:
        return importlib.import_module(_BACKEND_MODULES[backend])
    except ModuleNotFoundError as e:
        raise TokenizerLoadError(label, _missing_reason(backend, e)) from None


def _call(backend: str, label: str, *args: Any, **options: Any) -> Tokenizer:
    module = _backend_module(backend, label)
    try:
        return getattr(module, _LOADERS[backend])(*args, **options)
    except ModuleNotFoundError as e:  # backends import their dependency lazily too
        raise TokenizerLoadError(label, _missing_reason(backend, e)) from None


def _missing_reason(backend: str, error: ModuleNotFoundError) -> str:
    missing = error.name or str(error)
    if missing.startswith("detok."):
        return f"the {backend} backend is not available in this detok installation ({error})"
    top = missing.split(".")[0]
    hint = _INSTALL_HINTS.get(top, f"pip install {top}")
    return f"the {backend} backend needs the Python package {top!r}, which is not installed ({hint})"


def _read_chat_template(value: str | os.PathLike[str], label: str) -> str:
    """A template file (.jinja, or .json holding 'chat_template') or the template text itself."""
    text = os.fspath(value)
    if not isinstance(value, os.PathLike) and ("{{" in text or "{%" in text):
        return text
    path = Path(text).expanduser()
    if not path.is_file():
        raise TokenizerLoadError(label, f"chat_template {text!r} is neither a file nor a Jinja template")
    if path.suffix == ".json":
        from detok.tokenizer.hf import read_json

        template = read_json(path, label).get("chat_template")
        if isinstance(template, list):  # the named form: [{"name": "default", "template": ...}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        if not isinstance(template, str):
            raise TokenizerLoadError(label, f"{path.name} has no 'chat_template' string")
        return template
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerLoadError(label, f"cannot read chat template {path}: {e}") from None
