"""User Python tokenizer classes for tests (the Dynamo-style protocol), loaded as 'tests.helpers.user_tokenizers:Class'.

`QwenViaPython` wraps the qwen2 fixture through `tokenizers` but, being a plain Python class, has no
byte map: it streams by window diff over a byte-level decoder, which exercises the U+FFFD hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import tokenizers

from detok.tokenizer.python_backend import BaseTokenizer

_QWEN = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen2" / "tokenizer.json"


class QwenViaPython(BaseTokenizer):
    def __init__(self, model_path: str | None = None) -> None:
        self._tok = tokenizers.Tokenizer.from_file(str(model_path or _QWEN))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        added = self._tok.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        self.added_tokens = {i: t.content for i, t in added.items()}  # for spaces_between_special_tokens=False
        self.eos_token = "<|endoftext|>"

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=skip_special_tokens)
