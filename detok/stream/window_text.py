"""Window-diff text decoding over any `decode()` (TGI / vLLM / sgl-router's prefix/read offsets).

For tokenizers whose decoder is not a per-token byte map (WordPiece, user Python classes, ...).
Two decodes of a short window per step: the window starts where the last emitted text started, so
it is a couple of tokens long and the cost is O(1) per token. A window that ends in U+FFFD is held
(an incomplete character), for at most `_MAX_HOLD` tokens: by then the bytes can no longer become a
character and the U+FFFD is final.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from detok.stream.byte_text import OutOfVocabulary
from detok.tokenizer.base import Tokenizer

_MAX_HOLD = 8
_REPLACEMENT = "\ufffd"


class WindowTextDecoder:
    __slots__ = (
        "_tok", "_skip", "_spaces", "_vocab", "_drop", "_ids", "_prefix", "_read", "_prefix_text", "_held", "_added",
        "_after_added",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        skip_special: bool,
        spaces_between_special: bool,
        context_ids: Sequence[int],
    ) -> None:
        self._tok = tokenizer
        self._skip = skip_special
        # the window diffs the backend's own decode; vLLM's raw-added rule (special tokens kept,
        # spaces_between_special_tokens=False) is applied here, token by token
        self._spaces = spaces_between_special if tokenizer.slow_special_spacing else True
        raw = not (skip_special or spaces_between_special or tokenizer.slow_special_spacing)
        self._added = tokenizer.added_tokens() if raw else None
        self._after_added = False
        self._vocab = tokenizer.vocab_size
        # Skipped special tokens decode to nothing anywhere: keeping them out of the window means a run
        # of them costs no decode at all (SGLang #8031).
        self._drop = tokenizer.special_ids if skip_special else frozenset()
        ctx = [i for i in context_ids if i not in self._drop]
        for i in ctx:
            if not 0 <= i < self._vocab:
                raise OutOfVocabulary(i)
        self._ids: list[int] = ctx
        self._prefix = 0
        self._read = len(ctx)
        self._prefix_text = self._decode(ctx)
        self._held = 0

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip, spaces_between_special_tokens=self._spaces)

    @property
    def holding(self) -> bool:
        return self._held > 0

    def push(self, ids: Sequence[int]) -> str:
        for i in ids:
            if not 0 <= i < self._vocab:
                raise OutOfVocabulary(i)
        drop = self._drop
        new = [i for i in ids if i not in drop] if drop else list(ids)
        if not new:
            return ""
        if self._added:
            return self._push_raw_added(new, self._added)
        self._ids.extend(new)
        self._held += len(new)
        return self._emit(final=False)

    def _push_raw_added(self, ids: list[int], added: Mapping[int, str]) -> str:
        """An added token right after an added token is its raw content; it still enters the
        window (its own text is dropped), which then restarts after it."""
        out: list[str] = []
        start = 0
        for k, i in enumerate(ids):
            content = added.get(i)
            if content is not None and self._after_added:
                if k > start:
                    self._ids.extend(ids[start:k])
                    self._held += k - start
                    out.append(self._emit(final=False))
                self._ids.append(i)
                self._held += 1
                self._emit(final=True)
                out.append(content)
                start = k + 1
            self._after_added = content is not None
        if start < len(ids):
            self._ids.extend(ids[start:])
            self._held += len(ids) - start
            out.append(self._emit(final=False))
        return "".join(out)

    def _emit(self, final: bool) -> str:
        ids = self._ids
        end = len(ids)
        text = self._decode(ids[self._prefix :])
        if not final and text.endswith(_REPLACEMENT):
            # The last character may be incomplete: emit up to the last token boundary that ends
            # cleanly inside the held tokens, if there is one (a few more decodes, this case only),
            # and hold the rest - unless it is `_MAX_HOLD` tokens long: then its U+FFFD is final.
            # (The bound is on the incomplete tail, not on the tokens held: a step of several ids
            # may complete some characters and begin another.)
            for cut in range(end - 1, self._read, -1):
                clean = self._decode(ids[self._prefix : cut])
                if not clean.endswith(_REPLACEMENT):
                    if end - cut < _MAX_HOLD:
                        text, end = clean, cut
                    break
            else:
                if self._held < _MAX_HOLD:
                    return ""
        # A decoder that rewrites text already emitted (context-dependent) cannot retract it:
        # what follows the emitted length is emitted either way.
        delta = text[len(self._prefix_text) :]
        # The next window starts at the tokens that produced this delta, so it stays short.
        self._prefix = self._read
        self._read = end
        self._prefix_text = self._decode(ids[self._prefix : end])
        self._held = len(ids) - end
        if self._prefix > 64:  # drop ids that will never be decoded again
            del ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        return delta

    def flush(self) -> str:
        if self._read == len(self._ids):
            return ""
        return self._emit(final=True)
