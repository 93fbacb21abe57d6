"""A prompt's ids with the text between its added tokens memoized (Hugging Face backend).

`tokenizers` cuts a text at its added tokens (the chat template's markers) before anything else: each
piece between them is then pre-tokenized and BPE-merged on its own, so the ids of a text are the added
tokens' ids and each piece's ids, in order. A chat prompt's pieces repeat from request to request (the
system prompt, the role headers, the tool definitions), and tokenizing them is the largest per-request
cost of the frontend (it grows with the system prompt). `SegmentedEncoder` cuts the text as `tokenizers`
does and keeps each piece's ids in a bounded LRU: the result is the same function of the text, memoized,
exact by construction and checked against `tokenizers` by property tests.

It applies only where that cut is plain string matching and a piece's ids do not depend on where
it stands: no normalizer (an added token marked `normalized` is then matched on the raw text too);
no added token with `single_word`, `lstrip` or `rstrip`, none empty; `encode_special_tokens` off;
pre-tokenizers that treat every piece alike (`_PIECEWISE`: not Metaspace, whose
`prepend_scheme="first"` marks only the text's first piece). Anything else encodes as before.
"""

from __future__ import annotations

import functools
from array import array
import json
import re
from collections.abc import Iterable
from typing import Any

import tokenizers

from detok.tokenizer.ascii_pieces import AsciiPieces

# Pieces whose ids are kept, least recently used dropped first; a piece longer than the second
# limit is encoded each time. At most ENTRIES x (MAX_CHARS characters, up to 4 bytes each, and
# their ids, 4 bytes each): ≈20 MB per frontend process if every entry were a full-size piece.
SEGMENT_CACHE_ENTRIES = 256
SEGMENT_CACHE_MAX_CHARS = 16_384

# Pre-tokenizers whose work on a piece does not depend on the piece's place in the text.
_PIECEWISE = frozenset({"ByteLevel", "Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit"})


def _piecewise(pre_tokenizer: dict[str, Any] | None) -> bool:
    if pre_tokenizer is None:
        return True
    if pre_tokenizer.get("type") == "Sequence":
        return all(_piecewise(p) for p in pre_tokenizer.get("pretokenizers") or [])
    return pre_tokenizer.get("type") in _PIECEWISE


def _spec(part: Any) -> dict[str, Any] | None:
    """A normalizer's or pre-tokenizer's JSON form (None: there is none)."""
    return None if part is None else json.loads(part.__getstate__())


def _no_normalizer(normalizer: dict[str, Any] | None) -> bool:
    """None, or a Sequence of nothing (DeepSeek's)."""
    return normalizer is None or (normalizer.get("type") == "Sequence" and not normalizer.get("normalizers"))


def _piece_encoder(tok: tokenizers.Tokenizer) -> Any:
    ascii_pieces = AsciiPieces.of(tok)  # (an ASCII piece without `tokenizers`' pre-tokenizer, where exact)

    def encode_piece(piece: str) -> array[int]:
        if ascii_pieces is not None:
            ids = ascii_pieces.encode(piece)
            if ids is not None:
                return array("I", ids)
        # (encode_batch_fast: the GIL is released while it works, as Tokenizer.encode_batch's callers
        # expect; the ids kept packed, 4 bytes each, not as a tuple of int objects)
        return array("I", tok.encode_batch_fast([piece], add_special_tokens=False)[0].ids)

    return encode_piece


def _splitter(contents: Iterable[str]) -> re.Pattern[str] | None:
    """Leftmost-longest literal matching, as `tokenizers`' Aho-Corasick trie. The pattern is the
    contents' trie, a longer continuation tried before ending: at a position only one branch can
    match the next character, so the first match found there is the longest. (A flat alternation
    of hundreds of literals is tried literal by literal at every position: 5x slower.)"""
    trie: dict[str, Any] = {}
    for word in set(contents):
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}  # (a word ends here)
    return re.compile(_trie_pattern(trie)) if trie else None


def _trie_pattern(node: dict[str, Any]) -> str:
    branches = [re.escape(ch) + _trie_pattern(child) for ch, child in sorted(node.items()) if ch]
    if "" in node:  # ending here is the last choice
        branches.append("")
    if len(branches) == 1:
        return branches[0]
    return "(?:" + "|".join(branches) + ")"


class SegmentedEncoder:
    """`encode(text)` == `tok.encode(text, add_special_tokens=False).ids` (see the module)."""

    def __init__(self, tok: tokenizers.Tokenizer, raw: dict[str, int], normalized: dict[str, int]) -> None:
        self._ids = {**normalized, **raw}
        # `tokenizers` cuts at the tokens not `normalized` first, then the pieces left at the others
        self._raw, self._normalized = _splitter(raw), _splitter(normalized)
        self._encode_piece = _piece_encoder(tok)  # (a closure over `tok`, not `self`: no cycle)
        self._piece = functools.lru_cache(maxsize=SEGMENT_CACHE_ENTRIES)(self._encode_piece)

    @classmethod
    def of(cls, tok: tokenizers.Tokenizer) -> SegmentedEncoder | None:
        """The encoder of `tok`, or None where its cut is not plain string matching (read from its
        parts, not its whole JSON: milliseconds, not the 0.3 s of serializing a 150K vocabulary)."""
        if getattr(tok, "encode_special_tokens", False):
            return None
        if not _no_normalizer(_spec(tok.normalizer)) or not _piecewise(_spec(tok.pre_tokenizer)):
            return None
        raw: dict[str, int] = {}
        normalized: dict[str, int] = {}
        for token_id, added in tok.get_added_tokens_decoder().items():
            content = added.content
            if not isinstance(content, str) or not content or added.single_word or added.lstrip or added.rstrip:
                return None
            (normalized if added.normalized else raw)[content] = token_id
        return cls(tok, raw, normalized)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece, added in self._cut(text, self._raw):
            if added is not None:
                out.append(added)
                continue
            for part, inner in self._cut(piece, self._normalized):
                if inner is not None:
                    out.append(inner)
                elif len(part) > SEGMENT_CACHE_MAX_CHARS:
                    out.extend(self._encode_piece(part))
                else:
                    out.extend(self._piece(part))
        return out

    def cache_info(self) -> Any:
        return self._piece.cache_info()

    def _cut(self, text: str, pattern: re.Pattern[str] | None) -> Iterable[tuple[str, int | None]]:
        """(piece, None) for the text between matches (empty ones left out), (content, id) for a match."""
        if pattern is None:
            if text:
                yield text, None
            return
        at = 0
        for m in pattern.finditer(text):
            if m.start() > at:
                yield text[at : m.start()], None
            yield m.group(), self._ids[m.group()]
            at = m.end()
        if at < len(text):
            yield text[at:], None
