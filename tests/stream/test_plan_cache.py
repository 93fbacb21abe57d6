"""The decode-plan check's outcome kept in the cache folder: a second process's load of the same
tokenizer reads it back instead of checking again, and anything that changes what was checked
(the tokenizer's file, its class, a damaged entry) checks again."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import threading
from pathlib import Path

import msgspec
import pytest
import tokenizers
from tokenizers import decoders, models, pre_tokenizers

from detok.stream import plan_cache
from detok.stream.strategy import prepare_decoding
from detok.tokenizer.hf import HFTokenizer


def _write_tokenizer(folder: Path, decoder: decoders.Decoder) -> Path:
    """A real byte-level BPE tokenizer.json: the 256 byte tokens, a few merges, two specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet))}
    merges = [("h", "e"), ("l", "l"), ("he", "ll")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = tokenizers.Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoder
    tok.add_special_tokens(["<|end|>", "<|start|>"])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("DETOK_CACHE_DIR", str(folder))
    return folder


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "decode-plans").glob("*.msgpack"))


def _checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources whose byte map was derived (what a read-back skips)."""
    calls: list[str] = []
    derive = HFTokenizer.byte_decoding

    def counted(self: HFTokenizer):  # type: ignore[no-untyped-def]
        calls.append(self.source)
        return derive(self)

    monkeypatch.setattr(HFTokenizer, "byte_decoding", counted)
    return calls


def test_a_second_load_reads_the_checked_plan_back(tmp_path: Path, cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _write_tokenizer(tmp_path / "tok", decoders.ByteLevel())
    checks = _checks(monkeypatch)
    first = prepare_decoding(HFTokenizer.from_path(folder))
    assert first.strategy == "bytes" and len(checks) == 1 and len(_entries(cache)) == 1
    again = HFTokenizer.from_path(folder)
    second = prepare_decoding(again)
    assert len(checks) == 1, "the second load checked again"
    assert second.strategy == "bytes" and second.reason == first.reason
    assert first.decoding is not None and second.decoding is not None
    assert second.decoding.pieces == first.decoding.pieces
    assert second.decoding.special_ids == again.special_ids
    # the tables are built before the plan is handed out, as the check builds them
    assert set(second._tables) == set(first._tables)
    ids = again.encode("hello <|end|> héllo", add_special_tokens=False)
    for skip, spaces in ((True, True), (False, False), (False, True)):
        dec = second.text_decoder(skip, spaces, ())
        assert dec.push(ids) + dec.flush() == again.decode(ids, skip_special_tokens=skip,
                                                           spaces_between_special_tokens=spaces)


def test_a_changed_file_a_damaged_entry_or_a_subclass_checks_again(tmp_path: Path, cache: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _write_tokenizer(tmp_path / "tok", decoders.ByteLevel())
    checks = _checks(monkeypatch)
    prepare_decoding(HFTokenizer.from_path(folder))
    [entry] = _entries(cache)
    entry.write_bytes(entry.read_bytes()[:100])  # cut short
    prepare_decoding(HFTokenizer.from_path(folder))
    assert len(checks) == 2 and entry.stat().st_size > 100, "a damaged entry is checked again and rewritten"
    kept = msgspec.msgpack.decode(entry.read_bytes(), type=plan_cache.CheckedPlan)
    assert kept.pieces is not None
    entry.write_bytes(msgspec.msgpack.encode(msgspec.structs.replace(kept, pieces=kept.pieces[:-1])))
    prepare_decoding(HFTokenizer.from_path(folder))
    assert len(checks) == 3, "an entry that does not fit the tokenizer is checked again"

    class Renamed(HFTokenizer):
        pass

    Renamed.__module__ = HFTokenizer.__module__  # only the class differs
    prepare_decoding(Renamed.from_path(folder))
    assert len(checks) == 4, "another class (its decode may differ) is checked itself"

    data = json.loads((folder / "tokenizer.json").read_text())
    data["model"]["merges"] = data["model"]["merges"][:2]  # "hell" is no longer made
    (folder / "tokenizer.json").write_text(json.dumps(data))
    prepare_decoding(HFTokenizer.from_path(folder))
    assert len(checks) == 5, "a rewritten file is checked again"
    assert len(_entries(cache)) == 3


def test_a_map_that_does_not_verify_is_refused_from_the_kept_outcome_too(tmp_path: Path, cache: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A ByteLevel-shaped claim over a decoder that replaces "l": every "l" token decodes to "L".
    folder = _write_tokenizer(tmp_path / "tok", decoders.Sequence([decoders.ByteLevel(), decoders.Replace("l", "L")]))
    checks = _checks(monkeypatch)
    monkeypatch.setattr(HFTokenizer, "byte_decoding", lambda self: (checks.append(self.source),
                                                                    _bytelevel_claim(self))[1])
    plan = prepare_decoding(HFTokenizer.from_path(folder))
    assert plan.strategy == "window" and "byte map gives" in plan.reason
    with pytest.raises(ValueError, match="not exact"):
        prepare_decoding(HFTokenizer.from_path(folder), "bytes")
    assert len(checks) == 1, "the second load read the failed check back"
    again = prepare_decoding(HFTokenizer.from_path(folder))
    assert again.strategy == "window" and again.reason == plan.reason


def _bytelevel_claim(tok: HFTokenizer):  # type: ignore[no-untyped-def]
    from detok.tokenizer.byte_pieces import byte_decoding_from_decoder

    return byte_decoding_from_decoder({"type": "ByteLevel"}, tok.vocab_size, tok.id_to_token, tok.special_ids)


def test_no_digest_keeps_nothing(cache: Path) -> None:
    tok = HFTokenizer(tokenizers.Tokenizer.from_file(str(_write_tokenizer(cache.parent / "t", decoders.ByteLevel())
                                                         / "tokenizer.json")), "in memory")
    assert tok.content_digest is None
    assert prepare_decoding(tok).strategy == "bytes"
    assert _entries(cache) == [] and plan_cache.load_checked(tok) is None


def test_a_tiktoken_file_is_read_back_and_its_special_tokens_are_part_of_the_key(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from detok.tokenizer.tiktoken_backend import TiktokenTokenizer, load_tiktoken

    ranks = tmp_path / "bytes.tiktoken"
    ranks.write_text("".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)))
    calls: list[str] = []
    derive = TiktokenTokenizer.byte_decoding
    monkeypatch.setattr(TiktokenTokenizer, "byte_decoding", lambda self: (calls.append(self.source), derive(self))[1])
    first = prepare_decoding(load_tiktoken(str(ranks), special_tokens={"<|end|>": 256}))
    again = prepare_decoding(load_tiktoken(str(ranks), special_tokens={"<|end|>": 256}))
    assert first.strategy == again.strategy == "bytes" and len(calls) == 1
    assert again.decoding is not None and first.decoding is not None
    assert again.decoding.pieces == first.decoding.pieces
    # the same ids, the special token spelled otherwise: another tokenizer, checked itself
    other = prepare_decoding(load_tiktoken(str(ranks), special_tokens={"<|stop|>": 256}))
    assert len(calls) == 2 and other.decoding is not None and other.decoding.pieces[256] == b"<|stop|>"


def test_the_oldest_entries_beyond_the_bound_are_removed(tmp_path: Path, cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_cache, "MAX_KEPT_PLANS", 2)
    folder = _write_tokenizer(tmp_path / "tok", decoders.ByteLevel())
    old = cache / "decode-plans"
    old.mkdir(parents=True)
    for age, name in enumerate(("a", "b", "c")):  # three entries of other tokenizers, "a" the oldest
        (old / f"{name}.msgpack").write_bytes(b"x")
        os.utime(old / f"{name}.msgpack", (1000 + age, 1000 + age))
    prepare_decoding(HFTokenizer.from_path(folder))
    kept = {p.name for p in _entries(cache)}
    assert len(kept) == 2 and "c.msgpack" in kept and not kept & {"a.msgpack", "b.msgpack"}


def _hold_the_lock(cache: Path) -> int:
    (cache / "decode-plans").mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / "decode-plans" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_process_waits_for_the_one_checking_and_reads_its_outcome(tmp_path: Path, cache: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _write_tokenizer(tmp_path / "tok", decoders.ByteLevel())
    checks = _checks(monkeypatch)
    fd = _hold_the_lock(cache)  # as a worker that is checking this tokenizer does
    done: list[str] = []
    waiter = threading.Thread(target=lambda: done.append(prepare_decoding(HFTokenizer.from_path(folder)).strategy))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and checks == [], "it did not wait for the process holding the lock"
    checker = HFTokenizer.from_path(folder)  # that process's outcome, kept as it finishes
    plan_cache.store_checked(checker, _bytelevel_claim(checker), "byte map verified against decode()")
    os.close(fd)
    waiter.join(30)
    assert done == ["bytes"] and checks == [], "the waiting process checked again instead of reading back"


@pytest.mark.timeout(30)
def test_a_process_that_holds_the_lock_too_long_is_not_waited_for(tmp_path: Path, cache: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_cache, "CHECK_WAIT_S", 0.2)
    folder = _write_tokenizer(tmp_path / "tok", decoders.ByteLevel())
    checks = _checks(monkeypatch)
    fd = _hold_the_lock(cache)
    try:
        assert prepare_decoding(HFTokenizer.from_path(folder)).strategy == "bytes" and len(checks) == 1
    finally:
        os.close(fd)
