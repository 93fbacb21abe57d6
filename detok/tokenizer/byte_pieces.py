"""Derive a per-token byte map from a Hugging Face decoder description.

Only decoders that really are per-token byte maps get one: ByteLevel (GPT-2, Llama-3, Qwen),
SentencePiece-style chains (Metaspace, or Replace ▁→space + ByteFallback + Fuse + Strip), and the
same chains without the ▁ replacement (ByteFallback + Fuse: each token its own text, <0xNN> a byte).
Anything else (WordPiece, CTC, BPE suffix decoders) returns None and streams by window diff.
The claim is verified against `decode` by the stream layer, so a wrong guess costs speed, not text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from detok.tokenizer.base import ByteDecoding

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def bytelevel_char_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode table."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def _bytelevel_translation() -> dict[int, str]:
    """bytelevel_char_to_byte as a str.translate table onto the Latin-1 char of each byte. Every
    other char up to U+00FF becomes U+FFFF, so that a token holding any unmapped char fails the
    Latin-1 encode (the chars above U+00FF that are not in the table fail it already)."""
    trans = {ord(c): chr(b) for c, b in bytelevel_char_to_byte().items()}
    for code in range(256):
        trans.setdefault(code, "\uffff")
    return trans


def bytelevel_piece(token: str) -> bytes:
    # one translate and one encode in C per token: a 150K vocabulary is mapped at every worker start
    try:
        return token.translate(_bytelevel_translation()).encode("latin-1")
    except UnicodeEncodeError:  # tokenizers falls back to the token's own UTF-8 for unmapped chars
        return token.encode("utf-8")


def spm_piece(token: str, byte_fallback: bool, spaces: bool = True) -> bytes:
    """A SentencePiece-style token's bytes: <0xNN> its byte (with byte fallback), ▁ a space
    (unless `spaces` is off: a decoder without the ▁ replacement keeps it)."""
    if byte_fallback:
        m = _BYTE_TOKEN.match(token)
        if m:
            return bytes((int(m.group(1), 16),))
    return (token.replace("\u2581", " ") if spaces else token).encode("utf-8")


def _flatten(decoder: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not decoder:
        return []
    if decoder.get("type") == "Sequence":
        out: list[dict[str, Any]] = []
        for d in decoder.get("decoders", []):
            out.extend(_flatten(d))
        return out
    return [decoder]


def _classify(decoder: dict[str, Any] | None) -> tuple[str, bool, bool] | None:
    """(kind, byte_fallback, strip_leading_space) for decoders that are byte maps, else None.
    Kinds: "bytelevel", "spm" (▁ is a space) and "raw" (tokens are their own text)."""
    parts = _flatten(decoder)
    kinds = [p.get("type") for p in parts]
    if kinds == ["ByteLevel"]:
        return ("bytelevel", False, False)
    if not parts:
        return None  # no decoder: tokenizers joins the tokens with spaces
    byte_fallback = "ByteFallback" in kinds
    strip = False
    meta = False
    for p in parts:
        t = p.get("type")
        if t == "Metaspace":
            meta = True
            scheme = p.get("prepend_scheme")
            strip = scheme in ("first", "always") if scheme is not None else bool(p.get("add_prefix_space", True))
        elif t == "Replace":
            pattern = p.get("pattern", {})
            if pattern.get("String") != "\u2581" or p.get("content") != " ":
                return None
            meta = True
        elif t == "Strip":
            if p.get("content") != " " or p.get("stop", 0) != 0 or p.get("start", 0) > 1:
                return None
            strip = p.get("start", 0) == 1
        elif t not in ("ByteFallback", "Fuse"):
            return None
    return ("spm" if meta else "raw", byte_fallback, strip)


def byte_decoding_from_decoder(
    decoder: dict[str, Any] | None,
    vocab_size: int,
    id_to_token: Callable[[int], str | None],
    special_ids: frozenset[int],
) -> ByteDecoding | None:
    kind = _classify(decoder)
    if kind is None:
        return None
    name, byte_fallback, strip = kind
    pieces: list[bytes] = []
    for i in range(vocab_size):
        tok = id_to_token(i)
        if tok is None:
            pieces.append(b"")
        elif name == "bytelevel":
            pieces.append(bytelevel_piece(tok))
        else:
            pieces.append(spm_piece(tok, byte_fallback, spaces=name == "spm"))
    return ByteDecoding(pieces=pieces, special_ids=special_ids, strip_leading_space=strip)
