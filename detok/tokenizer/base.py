"""The one tokenizer protocol every backend implements.

A backend implements the abstract methods below. Everything the rest of detok needs beyond them
(batch encode, the special-token spacing rule, chat templates, load metadata) is provided here once,
so backends stay small and behave the same.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SUPPORTED_FORMATS = (
    "tokenizer.json (Hugging Face tokenizers) or a folder holding one",
    "tiktoken encoding or model name (cl100k_base, o200k_base, gpt-4o, ...) or a .tiktoken file",
    "SentencePiece .model",
    "GGUF .gguf (SPM, BPE, WPM, UGM vocabularies)",
    "mistral-common Tekken .json or .model.vN",
    "user Python class 'pkg.module:Class'",
    "'mock'",
    "Hugging Face Hub id 'org/name'",
)


class TokenizerLoadError(Exception):
    """Raised for any tokenizer that cannot be loaded; names the source and the supported formats."""

    def __init__(self, source: object, reason: str) -> None:
        self.source = str(source)
        self.reason = reason
        formats = "\n  - ".join(SUPPORTED_FORMATS)
        super().__init__(
            f"cannot load tokenizer from {self.source!r}: {reason}\nsupported formats:\n  - {formats}"
        )


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    bos: str | None = None
    eos: str | None = None
    unk: str | None = None
    pad: str | None = None
    sep: str | None = None
    cls: str | None = None
    mask: str | None = None
    additional: tuple[str, ...] = ()

    def named(self) -> dict[str, str]:
        """The named special tokens that are set (bos, eos, ...), without `additional`."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "additional" and value is not None:
                out[f.name] = value
        return out


@dataclasses.dataclass(frozen=True)
class ByteDecoding:
    """A claim that `decode` is a per-token byte map, which the stream layer verifies at load.

    decode(ids, skip_special_tokens=s) == utf8_lossy(b"".join(pieces[i] for i in ids if kept)),
    where special ids are dropped when s is true, and one leading space of the whole text is
    removed when `strip_leading_space` (SentencePiece's Metaspace / Strip decoders).
    """

    pieces: Sequence[bytes]
    special_ids: frozenset[int]
    strip_leading_space: bool = False

    def __post_init__(self) -> None:
        # kept as a tuple: one of atomic bytes is untracked by the cycle collector, where a list of
        # every id's bytes is walked (and the cache evicted) at each full collection of the process
        if type(self.pieces) is not tuple:
            object.__setattr__(self, "pieces", tuple(self.pieces))


@dataclasses.dataclass
class TokenizerInfo:
    backend: str
    source: str
    vocab_size: int
    load_seconds: float = 0.0


class Tokenizer(ABC):
    """Encode, decode, vocabulary and chat template, whatever the backend."""

    backend: str = "abstract"
    # transformers' slow-tokenizer rule for `spaces_between_special_tokens=True`: each special token
    # its own segment, segments joined by " ". Only a backend whose reference is such a tokenizer
    # sets it (a user Python class may); every native decoder inserts nothing (vLLM v1, SGLang).
    slow_special_spacing: bool = False
    # A digest of everything `decode` depends on (the files and library a backend loaded), where
    # the backend knows it: it keys what is derived from decode and kept on disk (the verified
    # decode plan, `detok.stream.plan_cache`). None: nothing derived from decode is kept.
    content_digest: str | None = None

    def __init__(self, source: str) -> None:
        self.source = source
        self.load_seconds = 0.0
        self._chat_template: str | None = None

    # ---- what every backend implements -------------------------------------------------------
    @abstractmethod
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    @abstractmethod
    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        """Decode without the spaces-between-special-tokens rule (the backend's own decode)."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, added tokens included: every id in [0, vocab_size) may be decoded."""

    @property
    @abstractmethod
    def special_tokens(self) -> SpecialTokens: ...

    @property
    @abstractmethod
    def special_ids(self) -> frozenset[int]:
        """Ids that `skip_special_tokens=True` removes."""

    @abstractmethod
    def token_to_id(self, token: str) -> int | None: ...

    @abstractmethod
    def id_to_token(self, token_id: int) -> str | None: ...

    # ---- optional ----------------------------------------------------------------------------
    def _added_tokens(self) -> Mapping[int, str]:
        """Added-token ids -> their raw content (what vLLM reads from the added-tokens decoder).
        Default: the special ids, spelled by `id_to_token`."""
        out = {}
        for i in self.special_ids:
            content = self.id_to_token(i)
            if content is not None:
                out[i] = content
        return out

    def added_tokens(self) -> Mapping[int, str]:
        """Ids of added tokens (special or not) -> raw content, computed once."""
        cached: Mapping[int, str] | None = getattr(self, "_added_tokens_cache", None)
        if cached is None:
            cached = dict(self._added_tokens())
            self._added_tokens_cache = cached
        return cached

    def byte_decoding(self) -> ByteDecoding | None:
        """The per-token byte map if the backend's decoder is one (verified by the stream layer)."""
        return None

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [self.encode(t, add_special_tokens=add_special_tokens) for t in texts]

    def encode_prompt(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """`encode`'s ids of a prompt, by the backend's fastest exact way (`encode_batch`: it
        releases the GIL in the native backends; the Hugging Face one memoizes the pieces between
        added tokens, `detok.tokenizer.segment_cache`)."""
        return self.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Ids that end generation: the eos token (and any extra a backend knows of, e.g. eot)."""
        eos = self.special_tokens.eos
        tid = self.token_to_id(eos) if eos is not None else None
        return frozenset() if tid is None else frozenset((tid,))

    # ---- shared behaviour --------------------------------------------------------------------
    def decode(
        self,
        ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> str:
        """Decode ids with the backend's own decoder. Special tokens kept and
        `spaces_between_special_tokens=False`: vLLM's rule, an added token directly after another
        added token is its raw content (`decode_added_raw`). A backend that declares
        `slow_special_spacing` spaces special tokens as transformers' slow tokenizers do instead."""
        ids = list(ids)
        if skip_special_tokens:
            return self._decode_ids(ids, True)
        if self.slow_special_spacing:
            return self._decode_slow_spaced(ids) if spaces_between_special_tokens else self._decode_ids(ids, False)
        if spaces_between_special_tokens:
            return self._decode_ids(ids, False)
        return decode_added_raw(self, ids)

    def _decode_slow_spaced(self, ids: list[int]) -> str:
        specials = self.special_ids
        if not any(i in specials for i in ids):
            return self._decode_ids(ids, False)
        segments: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in specials:
                if run:
                    segments.append(self._decode_ids(run, False))
                    run = []
                segments.append(self._decode_ids([i], False))
            else:
                run.append(i)
        if run:
            segments.append(self._decode_ids(run, False))
        return " ".join(segments)

    @property
    def info(self) -> TokenizerInfo:
        return TokenizerInfo(self.backend, self.source, self.vocab_size, self.load_seconds)

    # ---- chat templates (rendering lives in detok.tokenizer.chat) ------------------------------
    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    def set_chat_template(self, template: str | None) -> None:
        self._chat_template = template

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        from detok.tokenizer.chat import render_chat_template

        return render_chat_template(
            self, messages, add_generation_prompt=add_generation_prompt, tools=tools, **kwargs
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.backend} source={self.source!r} vocab={self.vocab_size}>"


def decode_added_raw(tok: Tokenizer, ids: Sequence[int], first: int = 0) -> str:
    """The backend's decode of `ids` (special tokens kept) where vLLM v1's
    spaces_between_special_tokens=False rule fires: an added token at position k > `first` whose
    predecessor is an added token contributes its raw content instead of its own text (the
    per-token delta of the native decode). Positions up to `first` (a prompt tail) never fire."""
    added = tok.added_tokens()
    ids = list(ids)
    fires = [k for k in range(first + 1, len(ids)) if ids[k] in added and ids[k - 1] in added]
    if not fires:
        return tok._decode_ids(ids, False)
    out: list[str] = []
    done = 0  # chars of the native decode already accounted for
    for k in fires:
        before = tok._decode_ids(ids[:k], False)
        out.append(before[done:])
        out.append(added[ids[k]])
        done = len(tok._decode_ids(ids[: k + 1], False))
    out.append(tok._decode_ids(ids, False)[done:])
    return "".join(out)


class StoredVocabularyTokenizer(Tokenizer):
    """A backend that fixes its vocabulary facts at load: it sets `_vocab_size`, `_special`,
    `_special_ids` and `_eos_ids` in its constructor, and these properties read them."""

    _vocab_size: int
    _special: SpecialTokens
    _special_ids: frozenset[int]
    _eos_ids: frozenset[int]

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def special_tokens(self) -> SpecialTokens:
        return self._special

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos_ids
