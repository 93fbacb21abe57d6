"""Choosing the decode strategy of a tokenizer, once, by checking it against `decode`.

A backend may claim its decoder is a per-token byte map (`Tokenizer.byte_decoding`). The claim is
verified here on the tokenizer itself — every id alone, every special token in both skip modes, and
random multi-token sequences in every decode mode — never assumed from a name. A claim that fails
falls back to the window diff, which is exact for any `decode`. The outcome is kept on disk for
the next process that loads the same tokenizer (`detok.stream.plan_cache`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from typing import Literal

from detok.stream.byte_text import ByteTables, ByteTextDecoder, raw_added_changes_text
from detok.stream.plan_cache import load_checked, one_checker, store_checked
from detok.stream.window_text import WindowTextDecoder
from detok.tokenizer.base import ByteDecoding, Tokenizer

log = logging.getLogger("detok.stream")

Strategy = Literal["bytes", "window"]
TextDecoder = ByteTextDecoder | WindowTextDecoder

_PLAN_ATTR = "_detok_decode_plan"
_VERIFIED = "byte map verified against decode()"
_MODES = ((True, True), (False, False), (False, True))  # (skip_special_tokens, spaces_between_special_tokens)
# The byte tables of a tokenizer: special tokens skipped, kept, or kept with vLLM's raw-added rule
_SKIP, _KEEP, _RAW = "skip", "keep", "raw"
_SAMPLE_TEXT = (
    "Hello, world! The quick brown fox. 北京欢迎你 🫨👍🏽👨‍👩‍👧 สวัสดี مرحبا नमस्ते "
    "def f(x):\n    return x ** 2  # code\n\tÀ la carte — «quotes» 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"
)


def _table_kind(tokenizer: Tokenizer, decoding: ByteDecoding, skip_special: bool, spaces: bool) -> str | None:
    """Which byte table a decode mode uses; None where the byte table cannot give its text (the
    slow-tokenizer spacing a backend may declare)."""
    if skip_special:
        return _SKIP
    if tokenizer.slow_special_spacing:
        return None if spaces else _KEEP
    if spaces or not raw_added_changes_text(decoding, tokenizer.added_tokens()):
        return _KEEP
    return _RAW


def _build_tables(tokenizer: Tokenizer, decoding: ByteDecoding, kind: str) -> ByteTables:
    return ByteTables(decoding, kind == _SKIP, tokenizer.added_tokens() if kind == _RAW else None)


class DecodePlan:
    """How streams of one tokenizer decode: the strategy and its per-mode tables."""

    def __init__(self, tokenizer: Tokenizer, strategy: Strategy, decoding: ByteDecoding | None, reason: str,
                 tables: dict[str, ByteTables] | None = None) -> None:
        self.tokenizer = tokenizer
        self.strategy: Strategy = strategy
        self.reason = reason
        self.decoding = decoding  # the verified byte map (None for the window strategy)
        self.eos_ids = frozenset(tokenizer.eos_token_ids)  # computed once, not per request
        self.vocab_size = tokenizer.vocab_size
        self._kinds: dict[tuple[bool, bool], str | None] = {}
        self._tables: dict[str, ByteTables] = dict(tables or {})  # kind -> its tables (the verified ones)
        self._ready: dict[tuple[bool, bool], ByteTables] = {}  # decode mode -> its tables, once built
        # (decode mode, ignore_eos) -> what a plain stream starts from (DecodeStream's; None: no table)
        self.plain_templates: dict[tuple[bool, bool, bool], tuple[object, ...] | None] = {}

    def tables(self, skip_special: bool, spaces_between_special: bool) -> ByteTables | None:
        """The byte table of a decode mode (shared by every mode that gives the same text), or
        None where that mode decodes by window."""
        mode = (skip_special, spaces_between_special)
        ready = self._ready.get(mode)
        if ready is not None:  # (every request asks: one lookup)
            return ready
        assert self.decoding is not None
        if mode not in self._kinds:
            self._kinds[mode] = _table_kind(self.tokenizer, self.decoding, *mode)
        kind = self._kinds[mode]
        if kind is None:
            return None
        tables = self._tables.get(kind)
        if tables is None:
            tables = self._tables[kind] = _build_tables(self.tokenizer, self.decoding, kind)
        self._ready[mode] = tables
        return tables

    def text_decoder(
        self, skip_special: bool, spaces_between_special: bool, context_ids: Sequence[int]
    ) -> TextDecoder:
        if self.strategy == "bytes":
            tables = self.tables(skip_special, spaces_between_special)
            if tables is not None:
                return ByteTextDecoder(tables, context_ids)
        return WindowTextDecoder(self.tokenizer, skip_special, spaces_between_special, context_ids)

    def __repr__(self) -> str:
        return f"<DecodePlan {self.strategy}: {self.reason}>"


def prepare_decoding(tokenizer: Tokenizer, strategy: Strategy | None = None) -> DecodePlan:
    """The tokenizer's decode plan, chosen and verified once and cached on the tokenizer.

    `strategy` overrides the choice: "window" always works; "bytes" raises if the tokenizer has no
    byte map or the map fails verification.
    """
    plan: DecodePlan | None = getattr(tokenizer, _PLAN_ATTR, None)
    if plan is not None and (strategy is None or plan.strategy == strategy):
        return plan
    plan = _choose(tokenizer, strategy)
    if strategy is None:
        setattr(tokenizer, _PLAN_ATTR, plan)
    return plan


def _choose(tokenizer: Tokenizer, strategy: Strategy | None) -> DecodePlan:
    if strategy == "window":
        return DecodePlan(tokenizer, "window", None, "requested")
    t0 = time.perf_counter()
    problem: str | None
    tables: dict[str, ByteTables] = {}
    with one_checker(tokenizer):
        checked = load_checked(tokenizer)  # another process checked this very tokenizer already
        if checked is None:
            decoding = tokenizer.byte_decoding()
            if decoding is None:
                problem = "the decoder is not a per-token byte map"
            else:
                problem, tables = _verify(tokenizer, decoding)
            store_checked(tokenizer, decoding if problem is None else None, problem or _VERIFIED)
    if checked is not None:
        decoding = checked.decoding()
        problem = checked.reason if decoding is None else None
        if decoding is not None:
            tables = _build_mode_tables(tokenizer, decoding)
    if problem is None:
        assert decoding is not None
        log.info("byte-table decoding %s for %s in %.2fs", "read back" if checked else "verified", tokenizer.source,
                 time.perf_counter() - t0)
        # the tables the check built are the plan's: a large vocabulary's take a pass over every id
        return DecodePlan(tokenizer, "bytes", decoding, _VERIFIED, tables)
    if strategy == "bytes":
        raise ValueError(f"byte-table decoding is not exact for {tokenizer.source}: {problem}")
    log.info("window-diff decoding for %s: %s", tokenizer.source, problem)
    return DecodePlan(tokenizer, "window", None, problem)


def _mode_tables(tokenizer: Tokenizer, decoding: ByteDecoding,
                 built: dict[str, ByteTables]) -> dict[tuple[bool, bool], ByteTables]:
    """Each decode mode's tables (None-kind modes left out), the ones built added to `built`."""
    modes = {}
    for skip, spaces in _MODES:
        kind = _table_kind(tokenizer, decoding, skip, spaces)
        if kind is not None:
            if kind not in built:  # (modes that give the same text share one table)
                built[kind] = _build_tables(tokenizer, decoding, kind)
            modes[skip, spaces] = built[kind]
    return modes


def _build_mode_tables(tokenizer: Tokenizer, decoding: ByteDecoding) -> dict[str, ByteTables]:
    """Every kind of table the decode modes use, built now, as the check builds them: never on a
    request's path."""
    built: dict[str, ByteTables] = {}
    _mode_tables(tokenizer, decoding, built)
    return built


def _byte_model_decode(tables: ByteTables, ids: Sequence[int]) -> str:
    """What decode() must give if the byte-map claim holds (the non-incremental statement)."""
    dec = ByteTextDecoder(tables, ())
    return dec.push(ids) + dec.flush()


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def verify_byte_decoding(tokenizer: Tokenizer, decoding: ByteDecoding, samples: int = 300, seed: int = 0) -> str | None:
    """None when the byte map reproduces decode(), else a description of the first difference.

    Sequences whose bytes are not valid UTF-8 are left out: there the project's rule (one U+FFFD
    per maximal invalid subpart) deliberately differs from some decoders (Hugging Face ByteFallback).
    """
    return _verify(tokenizer, decoding, samples, seed)[0]


def _verify(tokenizer: Tokenizer, decoding: ByteDecoding, samples: int = 300,
            seed: int = 0) -> tuple[str | None, dict[str, ByteTables]]:
    """`verify_byte_decoding`'s answer, and the tables it built (kind -> tables)."""
    built: dict[str, ByteTables] = {}
    n = tokenizer.vocab_size
    if len(decoding.pieces) != n:
        return f"byte map has {len(decoding.pieces)} entries for a vocabulary of {n}", built
    special = decoding.special_ids
    if special != tokenizer.special_ids:
        return "byte map's special ids differ from the tokenizer's", built
    pieces = decoding.pieces
    modes = _mode_tables(tokenizer, decoding, built)
    # Every id alone (specials kept), and every special skipped.
    decode_one = tokenizer._decode_ids
    strip = decoding.strip_leading_space
    for i in range(n):
        try:
            got = pieces[i].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if strip and got[:1] == " ":
            got = got[1:]
        want = decode_one([i], False)
        if want != got:
            return f"id {i}: decode gives {want!r}, byte map gives {got!r}", built
    for i in special:
        if tokenizer.decode([i], skip_special_tokens=True) != "":
            return f"special id {i} is not removed by skip_special_tokens", built
    # Sequences: real text in many scripts, and random ids mixed with specials, in every mode.
    rng = random.Random(seed)
    sequences = [tokenizer.encode(_SAMPLE_TEXT)]
    sequences += [tokenizer.encode(w) for w in _SAMPLE_TEXT.split()]
    special_list = sorted(special)
    added_list = sorted(i for i in tokenizer.added_tokens() if 0 <= i < n)
    for _ in range(samples):
        seq = [rng.randrange(n) for _ in range(rng.randint(1, 10))]
        if special_list and rng.random() < 0.5:
            seq.insert(rng.randrange(len(seq) + 1), rng.choice(special_list))
        if added_list and rng.random() < 0.3:  # added tokens back to back: the raw-added rule
            at = rng.randrange(len(seq) + 1)
            seq[at:at] = [rng.choice(added_list) for _ in range(rng.randint(2, 3))]
        sequences.append(seq)
    for seq in sequences:
        if not _valid_utf8(b"".join(pieces[i] for i in seq)):
            continue
        for (skip, spaces), tables in modes.items():
            want = tokenizer.decode(seq, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
            got = _byte_model_decode(tables, seq)
            if want != got:
                return f"ids {seq} (skip={skip}, spaces={spaces}): decode gives {want!r}, byte map gives {got!r}", built
    return None, built
