"""A user's Python tokenizer class, given as `"pkg.module:Class"` (the Dynamo-style protocol).

The class needs `encode(text) -> list[int]` and `decode(token_ids, skip_special_tokens=True) -> str`;
`encode_batch` is optional (BaseTokenizer supplies it). The module is imported and the methods are
checked at load, but the object is created lazily, with the model path as its one argument, on
first use: a worker that never decodes never pays for it. Optional attributes refine the protocol:
`vocab_size` (attribute or method; else the `vocab_size` option), `special_ids` / `all_special_ids`,
`eos_token_id(s)`, `bos_token` / `eos_token` / `unk_token` / `pad_token`, `token_to_id` /
`id_to_token`, `chat_template`, `added_tokens` (id -> raw content, for vLLM's
spaces_between_special_tokens=False rule; default: the special ids), and the class attribute
`slow_special_spacing = True` for a tokenizer whose reference is a transformers slow tokenizer
(special tokens spaced when spaces_between_special_tokens). `encode(text)` is called as is: the protocol has no
add_special_tokens, so a class that wants a BOS adds it itself. Decoding streams by window diff:
there is no byte map to claim.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from detok.tokenizer.base import SpecialTokens, Tokenizer, TokenizerLoadError

_OPTIONS = frozenset({"vocab_size", "special_ids", "eos_token_ids"})
_T = TypeVar("_T")


class BaseTokenizer:
    """Base class for user tokenizers: implement `encode` and `decode`; `encode_batch` comes free."""

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        raise NotImplementedError


# ---- load-time checks ---------------------------------------------------------------------------
def _parse_spec(spec: str | None, module: str | None, cls: str | None) -> tuple[str, str]:
    if spec is not None:
        if module is not None or cls is not None:
            raise TokenizerLoadError(spec, "give either a 'module:Class' spec or module= and cls=, not both")
        module_name, sep, class_name = spec.partition(":")
        if not sep or not module_name or not class_name or ":" in class_name:
            raise TokenizerLoadError(spec, "a Python tokenizer is given as 'package.module:ClassName'")
        return module_name.strip(), class_name.strip()
    if not module or not cls:
        raise TokenizerLoadError(f"{module}:{cls}", "a Python tokenizer needs both a module and a class name")
    return module, cls


def _import_class(module_name: str, class_name: str, source: str) -> type:
    try:
        mod = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise TokenizerLoadError(source, f"module {module_name!r} not found (is it on sys.path?)") from None
        raise TokenizerLoadError(source, f"importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # the module's own import-time errors
        raise TokenizerLoadError(source, f"importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    found = getattr(mod, class_name, None)
    if found is None:
        raise TokenizerLoadError(source, f"module {module_name!r} has no attribute {class_name!r}")
    if not isinstance(found, type):
        raise TokenizerLoadError(source, f"{module_name}.{class_name} is a {type(found).__name__}, not a class")
    return found


def _check_method(
    klass: type, name: str, sample_args: tuple[Any, ...], sample_kwargs: dict[str, Any], source: str
) -> None:
    method = getattr(klass, name, None)
    if method is None or not callable(method):
        raise TokenizerLoadError(
            source, f"{klass.__name__} has no {name}() method (the protocol needs encode and decode)"
        )
    if issubclass(klass, BaseTokenizer) and method is getattr(BaseTokenizer, name):
        raise TokenizerLoadError(source, f"{klass.__name__} inherits BaseTokenizer.{name}() without implementing it")
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    # a plain function on the class still takes self; static and class methods do not
    bound = isinstance(inspect.getattr_static(klass, name), (staticmethod, classmethod))
    try:
        signature.bind(*(() if bound else (None,)), *sample_args, **sample_kwargs)
    except TypeError as e:
        call = ", ".join([*map(repr, sample_args), *(f"{k}={v!r}" for k, v in sample_kwargs.items())])
        raise TokenizerLoadError(source, f"{klass.__name__}.{name} cannot be called as {name}({call}): {e}") from None


# ---- the tokenizer ----------------------------------------------------------------------------
class PythonTokenizer(Tokenizer):
    backend = "python"

    def __init__(self, klass: type, source: str, model_path: str | None, options: dict[str, Any]) -> None:
        super().__init__(source)
        self._class = klass
        self._model_path = model_path
        self._options = options
        self._obj: Any = None
        self._init_lock = threading.Lock()
        self._derived: dict[str, Any] = {}

    @property  # type: ignore[override]
    def slow_special_spacing(self) -> bool:
        """Declared by the user's class (read without creating the object)."""
        return getattr(self._class, "slow_special_spacing", False) is True

    # ---- lazy instance ------------------------------------------------------------------------
    @property
    def instance(self) -> Any:
        """The user's tokenizer object, created on first use."""
        if self._obj is None:
            with self._init_lock:
                if self._obj is None:
                    self._obj = self._create()
        return self._obj

    def _create(self) -> Any:
        args = () if self._model_path is None else (self._model_path,)
        try:
            return self._class(*args)
        except Exception as e:
            raise TokenizerLoadError(
                self.source, f"{self._class.__name__}({', '.join(map(repr, args))}) raised {type(e).__name__}: {e}"
            ) from e

    def _optional(self, *names: str) -> Any:
        obj = self.instance
        for name in names:
            value = getattr(obj, name, None)
            if value is not None:
                return value() if callable(value) else value
        return None

    def _cached(self, key: str, compute: Callable[[], _T]) -> _T:
        if key not in self._derived:
            self._derived[key] = compute()
        return cast(_T, self._derived[key])

    # ---- protocol ---------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [int(i) for i in self.instance.encode(text)]

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = False) -> list[list[int]]:
        obj = self.instance
        texts = list(texts)
        batch = obj.encode_batch(texts) if callable(getattr(obj, "encode_batch", None)) else map(obj.encode, texts)
        return [[int(i) for i in ids] for ids in batch]

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        text = self.instance.decode(list(ids), skip_special_tokens=skip_special_tokens)
        if not isinstance(text, str):
            raise TypeError(f"{self.source}: decode() returned {type(text).__name__}, not str")
        return text

    @property
    def vocab_size(self) -> int:
        def compute() -> int:
            size = self._options.get("vocab_size")
            if size is None:
                size = self._optional("vocab_size", "get_vocab_size")
            if not isinstance(size, int) or size <= 0:
                raise TokenizerLoadError(
                    self.source, "the tokenizer has no vocab_size attribute: pass vocab_size=N when loading it"
                )
            return size

        return self._cached("vocab_size", compute)

    @property
    def special_tokens(self) -> SpecialTokens:
        def compute() -> SpecialTokens:
            def named(name: str) -> str | None:
                value = getattr(self.instance, f"{name}_token", None)
                return value if isinstance(value, str) else None

            return SpecialTokens(
                bos=named("bos"),
                eos=named("eos"),
                unk=named("unk"),
                pad=named("pad"),
                sep=named("sep"),
                cls=named("cls"),
                mask=named("mask"),
            )

        return self._cached("special_tokens", compute)

    @property
    def special_ids(self) -> frozenset[int]:
        def compute() -> frozenset[int]:
            ids = self._options.get("special_ids")
            if ids is None:
                ids = self._optional("special_ids", "all_special_ids") or ()
            return frozenset(int(i) for i in ids)

        return self._cached("special_ids", compute)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        def compute() -> frozenset[int]:
            ids = self._options.get("eos_token_ids")
            if ids is None:
                ids = self._optional("eos_token_ids", "eos_token_id")
            if ids is None:
                return super(PythonTokenizer, self).eos_token_ids
            return frozenset((ids,)) if isinstance(ids, int) else frozenset(int(i) for i in ids)

        return self._cached("eos_token_ids", compute)

    def _added_tokens(self) -> Mapping[int, str]:
        declared = self._optional("added_tokens")
        if declared is None:
            return super()._added_tokens()
        return {int(i): str(content) for i, content in dict(declared).items()}

    def token_to_id(self, token: str) -> int | None:
        for name in ("token_to_id", "convert_tokens_to_ids"):
            method = getattr(self.instance, name, None)
            if callable(method):
                tid = method(token)
                return tid if isinstance(tid, int) else None
        # no lookup method: a token the class encodes as one id that decodes back to it
        ids = self.encode(token)
        if len(ids) == 1 and self._decode_ids(ids, False) == token:
            return ids[0]
        return None

    def id_to_token(self, token_id: int) -> str | None:
        for name in ("id_to_token", "convert_ids_to_tokens"):
            method = getattr(self.instance, name, None)
            if callable(method):
                token = method(token_id)
                return token if isinstance(token, str) else None
        return None

    @property
    def chat_template(self) -> str | None:
        if self._chat_template is not None:
            return self._chat_template
        template = getattr(self.instance, "chat_template", None)
        return template if isinstance(template, str) else None


def load_python(
    spec: str | None = None,
    module: str | None = None,
    cls: str | None = None,
    model_path: str | None = None,
    **options: Any,
) -> Tokenizer:
    """Import `module:Class` and check its methods now; create the object on first use.

    Options: `vocab_size`, `special_ids`, `eos_token_ids` for classes that do not expose them.
    """
    module_name, class_name = _parse_spec(spec, module, cls)
    source = f"{module_name}:{class_name}"
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TokenizerLoadError(
            source, f"unknown python tokenizer option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}"
        )
    klass = _import_class(module_name, class_name, source)
    _check_method(klass, "encode", ("text",), {}, source)
    _check_method(klass, "decode", ([1, 2],), {"skip_special_tokens": True}, source)
    return PythonTokenizer(klass, source, model_path, dict(options))
