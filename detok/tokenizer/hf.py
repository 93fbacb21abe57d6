"""Hugging Face `tokenizers` backend: tokenizer.json plus tokenizer_config.json / chat templates."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers

from detok.tokenizer.base import ByteDecoding, SpecialTokens, StoredVocabularyTokenizer, TokenizerLoadError
from detok.tokenizer.byte_pieces import byte_decoding_from_decoder
from detok.tokenizer.end_markers import end_of_generation
from detok.tokenizer.segment_cache import SegmentedEncoder

_NAMED = ("bos", "eos", "unk", "pad", "sep", "cls", "mask")
_UNBUILT = object()
# End-of-sequence tokens of well-known families, used only when no config names the eos token
# (a bare tokenizer.json): ending a request is safer than generating past its end. A multi-message
# format's reply ends come first, and its <|end|> is no end (detok.tokenizer.end_markers).
_KNOWN_EOS = ("<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>", "</s>", "<|end|>", "<eos>")


def _token_content(value: Any) -> str | None:
    """tokenizer_config.json stores a special token as a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def read_json(path: Path, source: object) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise TokenizerLoadError(source, f"{path.name} is not valid JSON ({e})") from None
    except OSError as e:
        raise TokenizerLoadError(source, f"cannot read {path}: {e.strerror}") from None
    if not isinstance(data, dict):
        raise TokenizerLoadError(source, f"{path.name} does not hold a JSON object")
    return data


class HFTokenizer(StoredVocabularyTokenizer):
    backend = "huggingface"

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        source: str,
        config: dict[str, Any] | None = None,
        chat_template: str | None = None,
        extra_eos_ids: Iterable[int] = (),
    ) -> None:
        super().__init__(source)
        self._tok = tokenizer
        # (like the sizes and maps read below, it assumes `tokenizer` gains no tokens once wrapped)
        self._segmented: SegmentedEncoder | None | object = _UNBUILT
        self._config = config or {}
        self._vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        added = tokenizer.get_added_tokens_decoder()
        # get_vocab_size can undercount when added ids leave gaps above the model's vocabulary
        if added:
            self._vocab_size = max(self._vocab_size, max(added) + 1)
        self._special_ids = frozenset(i for i, t in added.items() if t.special)
        named = {}
        for name in _NAMED:
            content = _token_content(self._config.get(f"{name}_token"))
            if content is not None:
                named[name] = content
        additional = tuple(
            c
            for c in (_token_content(v) for v in self._config.get("additional_special_tokens") or [])
            if c is not None
        ) or tuple(t.content for i, t in sorted(added.items()) if t.special and t.content not in named.values())
        self._special = SpecialTokens(**named, additional=additional)
        if "eos" not in named:
            present = end_of_generation(_KNOWN_EOS, lambda t: tokenizer.token_to_id(t) in self._special_ids)
            if present:
                named["eos"] = present[0]
                self._special = SpecialTokens(**named, additional=additional)
                extra_eos_ids = [*extra_eos_ids, *(tokenizer.token_to_id(t) for t in present)]
        eos_id = tokenizer.token_to_id(self._special.eos) if self._special.eos is not None else None
        self._eos_ids = frozenset(i for i in (*extra_eos_ids, eos_id) if i is not None)
        template = chat_template if chat_template is not None else self._config.get("chat_template")
        if isinstance(template, list):  # the named-template form: [{"name": "default", "template": ...}]
            by_name = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = by_name.get("default") or next(iter(by_name.values()), None)
        self.set_chat_template(template if isinstance(template, str) else None)

    # ---- loading ----------------------------------------------------------------------------
    @classmethod
    def from_path(cls, path: str | os.PathLike[str], source: str | None = None) -> HFTokenizer:
        """Load a tokenizer.json, or a folder holding one with its config and template files."""
        p = Path(path)
        src = source or str(path)
        folder = p if p.is_dir() else p.parent
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise TokenizerLoadError(src, f"no tokenizer.json in {folder}")
        try:
            data = file.read_bytes()  # read once: the digest is of exactly what is loaded
            tok = tokenizers.Tokenizer.from_buffer(data)
        except OSError as e:
            raise TokenizerLoadError(src, f"cannot read {file}: {e.strerror}") from None
        except Exception as e:  # the Rust parser's errors are plain Exceptions
            read_json(file, src)  # corrupt JSON gets its own clear message
            raise TokenizerLoadError(src, f"{file.name} is not a tokenizers file ({e})") from None
        config: dict[str, Any] = {}
        if (folder / "tokenizer_config.json").is_file():
            config = read_json(folder / "tokenizer_config.json", src)
        template = None
        if (folder / "chat_template.jinja").is_file():
            template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        elif (folder / "chat_template.json").is_file():
            template = _token_content({"content": read_json(folder / "chat_template.json", src).get("chat_template")})
        extra_eos: list[int] = []
        if (folder / "generation_config.json").is_file():
            eos = read_json(folder / "generation_config.json", src).get("eos_token_id")
            extra_eos = [e for e in (eos if isinstance(eos, list) else [eos]) if isinstance(e, int)]
        loaded = cls(tok, src, config=config, chat_template=template, extra_eos_ids=extra_eos)
        # decode depends on tokenizer.json and the library that runs it (the config names tokens)
        loaded.content_digest = hashlib.sha256(f"tokenizers {tokenizers.__version__}\n".encode() + data).hexdigest()
        return loaded

    # ---- protocol ---------------------------------------------------------------------------
    @property
    def hf_tokenizer(self) -> tokenizers.Tokenizer:
        return self._tok

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = False) -> list[list[int]]:
        # encode_batch(_fast) releases the GIL while it works (encode holds it for the whole call,
        # 0.6 s per 100K tokens); _fast skips the offsets, which nothing here reads (2-3x faster)
        encs = self._tok.encode_batch_fast(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encs]

    def encode_prompt(self, text: str, add_special_tokens: bool = False) -> list[int]:
        segmented = self._segmented
        if segmented is _UNBUILT:  # (at the first prompt: a worker never needs it)
            segmented = self._segmented = SegmentedEncoder.of(self._tok)
        if segmented is None or add_special_tokens:
            return self.encode_batch([text], add_special_tokens=add_special_tokens)[0]
        return segmented.encode(text)  # type: ignore[union-attr]

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def _added_tokens(self) -> Mapping[int, str]:
        return {i: t.content for i, t in self._tok.get_added_tokens_decoder().items()}

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def byte_decoding(self) -> ByteDecoding | None:
        decoder = json.loads(self._tok.decoder.__getstate__()) if self._tok.decoder is not None else None
        return byte_decoding_from_decoder(decoder, self._vocab_size, self.id_to_token, self._special_ids)
