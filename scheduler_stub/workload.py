"""What the stand-in "model" generates: a deterministic token stream per request.

Each workload turns (prompt ids, seed) into an endless iterator of token ids, with `END` where the
model would sample end-of-sequence. The stub decides what END means (EOS finish, or skipped while
`min_tokens` / `ignore_eos` forbid stopping), so the same request always yields the same tokens,
streamed or not, whatever the batch it lands in.

Modes:
- corpus: replays paragraphs of a text (default: the embedded multilingual one) tokenized with the
  served tokenizer, starting at a paragraph chosen by the request; ends after one or two paragraphs.
- random: uniformly random non-special ids (the worst case for the decoder: broken UTF-8 included).
- trace: token sequences from a JSONL file (one list of ids, or {"output_ids": [...]}, per line).
- echo: the last user message of a chat prompt (the whole prompt of a completion), encoded with the
  served tokenizer with its special and added tokens recognised (`<think>`, `<tool_call>` become
  their ids): any model output, parser cases included, reproduced over HTTP
  (`scheduler_stub.echo`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

from detok.tokenizer.base import Tokenizer

END = -1  # the model samples end-of-sequence here
_PARAGRAPH_SPLIT = re.compile(r"\n\s*\n")


def request_hash(prompt_ids: Sequence[int], seed: int) -> int:
    """A stable 64-bit hash of a request's prompt and seed (Python's hash() is salted per process)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(seed.to_bytes(8, "little", signed=True))
    h.update(",".join(map(str, prompt_ids)).encode())
    return int.from_bytes(h.digest(), "little")


class Workload(ABC):
    name: str
    vocab_size: int  # of the served tokenizer (the stub's logprobs draw alternatives from it)

    @abstractmethod
    def tokens(self, prompt_ids: Sequence[int], seed: int) -> Iterator[int]:
        """The endless id stream the model generates for this request, `END` where it would stop."""

    @abstractmethod
    def sample_prompt(self, index: int, length: int = 8) -> list[int]:
        """A prompt for the `index`-th synthetic request of a headless run."""


class CorpusWorkload(Workload):
    name = "corpus"

    def __init__(self, tokenizer: Tokenizer, text: str, max_paragraphs_per_answer: int = 2) -> None:
        paragraphs = [p.strip() for p in _PARAGRAPH_SPLIT.split(text) if p.strip()]
        if not paragraphs:
            raise ValueError("the corpus holds no text")
        if max_paragraphs_per_answer < 1:
            raise ValueError("max_paragraphs_per_answer must be >= 1")
        self._paragraphs = tokenizer.encode_batch(paragraphs)
        self.vocab_size = tokenizer.vocab_size
        self._separator = tokenizer.encode("\n\n")
        self._per_answer = max_paragraphs_per_answer

    def tokens(self, prompt_ids: Sequence[int], seed: int) -> Iterator[int]:
        h = request_hash(prompt_ids, seed)
        n = len(self._paragraphs)
        paragraph = h % n
        per_answer = 1 + (h >> 32) % self._per_answer
        while True:
            for k in range(per_answer):
                if k:
                    yield from self._separator
                yield from self._paragraphs[paragraph % n]
                paragraph += 1
            yield END
            # past END only when the request ignores EOS: the "model" carries on with the next paragraph
            yield from self._separator

    def sample_prompt(self, index: int, length: int = 8) -> list[int]:
        return self._paragraphs[index % len(self._paragraphs)][:length]


class RandomIdsWorkload(Workload):
    name = "random"

    def __init__(self, tokenizer: Tokenizer, end_probability: float = 0.0) -> None:
        if not 0.0 <= end_probability < 1.0:
            raise ValueError("end_probability must be in [0, 1)")
        self._vocab_size = self.vocab_size = tokenizer.vocab_size
        self._special = tokenizer.special_ids
        if len(self._special) >= self._vocab_size:
            raise ValueError("the vocabulary holds no ordinary token")
        self._end_probability = end_probability

    def _draw(self, rng: random.Random) -> int:
        while True:
            token = rng.randrange(self._vocab_size)
            if token not in self._special:
                return token

    def tokens(self, prompt_ids: Sequence[int], seed: int) -> Iterator[int]:
        rng = random.Random(request_hash(prompt_ids, seed))
        while True:
            if self._end_probability and rng.random() < self._end_probability:
                yield END
            else:
                yield self._draw(rng)

    def sample_prompt(self, index: int, length: int = 8) -> list[int]:
        rng = random.Random(index)
        return [self._draw(rng) for _ in range(length)]


class TraceWorkload(Workload):
    name = "trace"

    def __init__(self, path: str | Path, vocab_size: int) -> None:
        self._traces = _read_trace(Path(path), vocab_size)
        self.vocab_size = vocab_size

    def tokens(self, prompt_ids: Sequence[int], seed: int) -> Iterator[int]:
        trace = self._traces[request_hash(prompt_ids, seed) % len(self._traces)]
        while True:  # replayed again only past END, i.e. when the request ignores EOS
            yield from trace
            yield END

    def sample_prompt(self, index: int, length: int = 8) -> list[int]:
        return self._traces[index % len(self._traces)][:length]


def _read_trace(path: Path, vocab_size: int) -> list[list[int]]:
    traces: list[list[int]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"cannot read trace {path}: {e.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not JSON ({e})") from None
        ids = record.get("output_ids", record.get("tokens")) if isinstance(record, dict) else record
        if not isinstance(ids, list) or not ids or not all(type(i) is int for i in ids):
            raise ValueError(f"{path}:{number}: expected a non-empty list of token ids or {{'output_ids': [...]}}")
        bad = next((i for i in ids if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise ValueError(f"{path}:{number}: token id {bad} is outside the vocabulary (size {vocab_size})")
        traces.append(ids)
    if not traces:
        raise ValueError(f"trace {path} holds no sequence")
    return traces


def embedded_corpus_text() -> str:
    return (resources.files("detok") / "_data" / "corpus" / "multilingual.txt").read_text(encoding="utf-8")


def make_workload(spec: str, tokenizer: Tokenizer, end_probability: float = 0.0) -> Workload:
    """Build a workload from a CLI spec: `corpus`, `corpus:PATH`, `random`, `trace:PATH` or `echo`."""
    kind, _, arg = spec.partition(":")
    if kind == "corpus":
        text = Path(arg).read_text(encoding="utf-8") if arg else embedded_corpus_text()
        return CorpusWorkload(tokenizer, text)
    if kind == "random" and not arg:
        return RandomIdsWorkload(tokenizer, end_probability)
    if kind == "trace" and arg:
        return TraceWorkload(arg, tokenizer.vocab_size)
    if kind == "echo" and not arg:
        from scheduler_stub.echo import EchoWorkload

        return EchoWorkload(tokenizer)
    raise ValueError(f"unknown workload {spec!r}: expected corpus, corpus:PATH, random, trace:PATH or echo")
