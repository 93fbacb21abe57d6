"""The tokenizer embedded in the package (what `detok serve` uses without --tokenizer): it is the
Qwen2 fixture, decompressed once into a cache folder that any process can load by path."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from detok.tokenizer.default import DEFAULT_SOURCE, default_tokenizer_dir, load_default_tokenizer
from detok.tokenizer.factory import load_tokenizer
from detok.tokenizer.hf import HFTokenizer

QWEN2 = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen2"
TEXT = "Hello, world! 北京欢迎你 東京の桜 서울 🫨👩‍💻 <|im_start|>user\nhi<|im_end|>"


def test_decompressed_folder_is_the_qwen2_fixture(tmp_path):
    folder = default_tokenizer_dir(tmp_path)
    assert (folder / "tokenizer.json").read_bytes() == (QWEN2 / "tokenizer.json").read_bytes()
    assert (folder / "chat_template.jinja").read_text() == (QWEN2 / "chat_template.jinja").read_text()
    stamp = (folder / "tokenizer.json").stat().st_mtime_ns
    assert default_tokenizer_dir(tmp_path) == folder  # second use: no new decompression
    assert (folder / "tokenizer.json").stat().st_mtime_ns == stamp
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left


def test_loads_like_the_fixture():
    tok = load_default_tokenizer()
    fixture = HFTokenizer.from_path(QWEN2)
    assert tok.source == DEFAULT_SOURCE
    ids = tok.encode(TEXT)
    assert ids == fixture.encode(TEXT) and tok.decode(ids, False, spaces_between_special_tokens=False) == TEXT
    assert tok.vocab_size == fixture.vocab_size and tok.eos_token_ids == fixture.eos_token_ids
    assert "<|im_start|>assistant" in tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_the_factory_loads_the_folder(tmp_path):
    tok = load_tokenizer(str(default_tokenizer_dir(tmp_path)))
    assert tok.encode(TEXT) == load_default_tokenizer().encode(TEXT)


def test_unwritable_cache_falls_back_to_the_temp_dir(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("DETOK_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = default_tokenizer_dir()
    assert folder.is_relative_to(tmp_path / "tmp") and (folder / "tokenizer.json").is_file()
    with pytest.raises(OSError):
        default_tokenizer_dir(blocker / "explicit")
