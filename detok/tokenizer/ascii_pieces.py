"""An ASCII prompt piece's ids without `tokenizers`' pre-tokenizer: the tokenizer's own split
pattern run by Python's `re`, each word BPE-merged by the tokenizer's own model and memoized.

Why: for a byte-level BPE tokenizer (Qwen2, Llama-3, ...) `tokenizers` spends most of a short piece's
encode in its pre-tokenizer's Oniguruma regex, the frontend's largest per-request cost after the chat
template.

Why it is exact: the pre-tokenizer must be `Split(pattern, "Isolated")` then `ByteLevel` without its
own regex or a prefix space, with no normalizer. The pattern may use only literals, the classes
`\\p{L}` `\\p{N}` `\\s` `\\S` `\\r` `\\n` `\\t`, bracket classes, groups, lookaheads, alternation and
greedy quantifiers (anything else: not used). On ASCII text those classes are exactly `[A-Za-z]`,
`[0-9]` and `[\\t\\n\\v\\f\\r ]` in both engines, which are both leftmost-first backtracking
engines over the same pattern. So the words are the same, and each word's ids come from the
tokenizer's own `model.tokenize` of its byte-level form. `tests/tokenizer/test_ascii_pieces.py`
checks it against `tokenizers` on every ASCII string of up to 2 characters and on random ones.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

import tokenizers

# A piece longer than this goes to `tokenizers`, which releases the GIL while it works: a long piece of
# words never seen would hold the GIL here for longer than `tokenizers` takes (once seen, far less).
# A word's ids are memoized for this many distinct words (≈100 bytes each).
ASCII_PIECE_MAX_CHARS = 1024
WORD_CACHE_ENTRIES = 32_768

# The pattern's tokens this translation knows; anything else and the piece encoder is not used.
_PATTERN_TOKEN = re.compile(r"\\p\{[LN]\}|\\[rnsSt]|\(\?[i]?:|\(\?[!=]|[()|?+*]|\{\d+(?:,\d*)?\}|\[\^?|\]|[ -~]")
_CLASS = {r"\p{L}": "A-Za-z", r"\p{N}": "0-9"}
_SPECIAL_LITERALS = set("\\.^$[{")  # (literal characters that mean something: not accepted bare)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet (what `ByteLevel` maps each byte to)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in kept}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_LEVEL = str.maketrans({chr(b): c for b, c in _bytes_to_unicode().items() if b < 128})


def ascii_pattern(regex: str) -> re.Pattern[str] | None:
    """`regex` (an Oniguruma pattern of a `Split` pre-tokenizer) as a Python pattern that splits ASCII
    text the same way, or None if it uses anything outside the known subset."""
    out: list[str] = []
    at, in_class = 0, False
    while at < len(regex):
        m = _PATTERN_TOKEN.match(regex, at)
        if m is None:
            return None
        tok = m.group()
        at = m.end()
        if tok in _CLASS:
            out.append(_CLASS[tok] if in_class else f"[{_CLASS[tok]}]")
        elif tok.startswith("["):
            if in_class or regex.startswith("]", at):  # (nested, or an empty class: not in the subset)
                return None
            in_class = True
            out.append(tok)
        elif tok == "]":
            if not in_class:
                return None
            in_class = False
            out.append(tok)
        elif tok == "(":
            out.append("(?:")  # (no capture: findall returns the whole matches)
        elif len(tok) == 1 and tok in _SPECIAL_LITERALS:
            return None
        else:
            out.append(tok)
    if in_class:
        return None
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error:
        return None


class AsciiPieces:
    """`encode(piece)` == the tokenizer's ids of an ASCII `piece` without special tokens."""

    def __init__(self, pattern: re.Pattern[str], tokenize: Callable[[str], Any]) -> None:
        self._pattern = pattern

        def word(text: str) -> tuple[int, ...]:
            return tuple(t.id for t in tokenize(text.translate(_BYTE_LEVEL)))

        self._word = functools.lru_cache(maxsize=WORD_CACHE_ENTRIES)(word)

    @classmethod
    def of(cls, tok: Any) -> AsciiPieces | None:
        """For a `tokenizers.Tokenizer` whose encode is Split-then-ByteLevel BPE (see the module),
        else None."""
        if tok.normalizer is not None or tok.truncation is not None or tok.padding is not None:
            return None
        model = tok.model  # (its type and dropout read, not its JSON: 0.3 s for a 150K vocabulary)
        if not isinstance(model, tokenizers.models.BPE) or model.dropout is not None:
            return None
        try:
            pre = json.loads(tok.pre_tokenizer.__getstate__())
        except (AttributeError, TypeError, ValueError):
            return None
        parts = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
        if not parts or len(parts) != 2:
            return None
        split, level = parts
        regex = (split.get("pattern") or {}).get("Regex")
        if (split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert")
                or not isinstance(regex, str) or level.get("type") != "ByteLevel" or level.get("add_prefix_space")
                or level.get("use_regex")):
            return None
        pattern = ascii_pattern(regex)
        return cls(pattern, model.tokenize) if pattern is not None else None

    def encode(self, piece: str) -> list[int] | None:
        """The ids of `piece` (ASCII, up to ASCII_PIECE_MAX_CHARS characters), None otherwise."""
        if not piece.isascii() or len(piece) > ASCII_PIECE_MAX_CHARS:
            return None
        words = self._pattern.findall(piece)
        if "" in words:  # (an empty match: how `tokenizers` splits at one is not modeled here)
            return None
        if sum(map(len, words)) != len(piece):  # text between the matches: pieces of their own
            words = self._words_and_gaps(piece)
        word = self._word
        ids: list[int] = []
        for w in words:
            ids += word(w)
        return ids

    def _words_and_gaps(self, piece: str) -> list[str]:
        out: list[str] = []
        at = 0
        for m in self._pattern.finditer(piece):
            if m.start() > at:
                out.append(piece[at : m.start()])
            out.append(m.group())
            at = m.end()
        if at < len(piece):
            out.append(piece[at:])
        return out
