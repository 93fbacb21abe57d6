"""The outcome of a tokenizer's decode-plan check, kept in detok's cache folder.

Checking a byte map against `decode` (`detok.stream.strategy`) takes a pass over every id, and
every process that decodes runs it: each worker of a pool, each restarted worker, each start of
the stack. The first process to check a tokenizer writes the outcome (the verified byte map, or
why there is none); the others read it back. An entry is keyed by the tokenizer's
`content_digest` (its files and the library that runs them), its class, and the source of the
code that derived and checked the map, so a change to any of them is a miss and checks again.
A tokenizer without a digest, or an entry that cannot be read or does not fit the tokenizer, is
checked as if there were no cache; a folder that cannot be written only costs the next process
the check. At most `MAX_KEPT_PLANS` entries are kept, the oldest removed first. Processes that
start together take turns (`one_checker`): the first checks, the others wait for its outcome.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import logging
import os
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Final

import msgspec

from detok.tokenizer.base import ByteDecoding, Tokenizer

log = logging.getLogger("detok.stream")

_FOLDER = "decode-plans"
# entries kept at most (each holds a vocabulary's bytes): a new one removes the
# oldest beyond it, so tokenizers and detok versions tried over time do not pile up
MAX_KEPT_PLANS: Final = 16
# how long a process waits for another that is checking (a pool's workers start together): past it,
# it checks itself (the other may hang)
CHECK_WAIT_S: Final = 30.0
_LOCK_POLL_S: Final = 0.02
# the modules whose code decides the outcome (the tokenizer's own module is added per class)
_CHECKING_MODULES = ("detok.stream.strategy", "detok.stream.byte_text", "detok.tokenizer.byte_pieces",
                     "detok.tokenizer.base", __name__)


class CheckedPlan(msgspec.Struct, array_like=True, frozen=True):
    """A check's outcome: the verified byte map (`pieces` not None), or why decode is not one."""

    pieces: list[bytes] | None
    special_ids: list[int]
    strip_leading_space: bool
    reason: str

    def decoding(self) -> ByteDecoding | None:
        if self.pieces is None:
            return None
        return ByteDecoding(self.pieces, frozenset(self.special_ids), self.strip_leading_space)


_decoder = msgspec.msgpack.Decoder(CheckedPlan)


@lru_cache(maxsize=None)
def _source_digest(module: str) -> str:
    """The digest of a module's source file ("" where it has none to read)."""
    path = getattr(importlib.import_module(module), "__file__", None)
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
    except OSError:
        return ""


def _entry_path(tokenizer: Tokenizer) -> Path | None:
    digest = tokenizer.content_digest
    if digest is None:
        return None
    cls = type(tokenizer)
    key = hashlib.sha256()
    for part in (digest, f"{cls.__module__}.{cls.__qualname__}", *map(_source_digest, (*_CHECKING_MODULES, cls.__module__))):
        key.update(part.encode() + b"\n")
    from detok.tokenizer.default import cache_folder  # (the tokenizers library: only where a digest is)

    return cache_folder() / _FOLDER / f"{key.hexdigest()[:32]}.msgpack"


@contextlib.contextmanager
def one_checker(tokenizer: Tokenizer) -> Iterator[None]:
    """Held around read-back-or-check: processes that start together (a pool's workers) check
    one at a time, so the first checks and the others read its outcome back. One lock for the
    folder (a lock file per entry would outlive its entry); without a digest or a folder that can
    be locked, nothing is held."""
    path = _entry_path(tokenizer)
    if path is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + CHECK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    log.warning("another process has been checking a tokenizer for %g s: %s checks itself",
                                CHECK_WAIT_S, tokenizer.source)
                    break
                time.sleep(_LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def load_checked(tokenizer: Tokenizer) -> CheckedPlan | None:
    """The kept outcome of checking this tokenizer, if there is one that fits it."""
    path = _entry_path(tokenizer)
    if path is None:
        return None
    try:
        plan = _decoder.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if plan.pieces is not None and (len(plan.pieces) != tokenizer.vocab_size
                                    or frozenset(plan.special_ids) != tokenizer.special_ids):
        return None  # cannot be this tokenizer's (a digest collision or a damaged file): check again
    return plan


def store_checked(tokenizer: Tokenizer, decoding: ByteDecoding | None, reason: str) -> None:
    """Keep a check's outcome for the next process that loads this tokenizer."""
    path = _entry_path(tokenizer)
    if path is None:
        return
    plan = CheckedPlan(
        None if decoding is None else list(decoding.pieces),
        sorted(decoding.special_ids) if decoding is not None else [],
        decoding.strip_leading_space if decoding is not None else False,
        reason,
    )
    from detok.tokenizer.default import write_atomically

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, msgspec.msgpack.encode(plan))
        _remove_oldest(path.parent, keep=path)
    except OSError as e:
        log.debug("decode plan of %s not kept in %s: %s", tokenizer.source, path.parent, e)


def _remove_oldest(folder: Path, keep: Path) -> None:
    """Entries beyond MAX_KEPT_PLANS, oldest first (never `keep`, the one just written)."""
    dated = []
    for entry in folder.glob("*.msgpack"):
        try:
            dated.append((entry.stat().st_mtime, entry))
        except OSError:  # removed meanwhile by another process
            continue
    dated.sort(reverse=True)
    for _, entry in dated[MAX_KEPT_PLANS:]:
        if entry != keep:
            entry.unlink(missing_ok=True)
