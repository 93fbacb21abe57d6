"""Hugging Face Hub loading, offline only: a cache laid out as huggingface_hub lays it out in tmp_path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
from huggingface_hub import constants
from huggingface_hub.utils import filter_repo_objects

import tests.helpers.tokenizers_available as avail
from detok import TokenizerLoadError, load_tokenizer
from detok.tokenizer import hub
from detok.tokenizer.hub import TOKENIZER_FILE_PATTERNS, download_tokenizer_files, looks_like_hub_id

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def populate_cache(cache: Path, repo_id: str, files: dict[str, Path], commit: str = COMMIT) -> Path:
    """Write `files` into a Hub cache: blobs by content hash, snapshot links to them, refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for folder in (repo / "refs", repo / "blobs", snapshot):
        folder.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for name, src in files.items():
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        try:
            (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
        except OSError:  # no symlinks (some Windows setups): huggingface_hub copies too
            (snapshot / name).write_bytes(data)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty offline Hub cache: huggingface_hub read its settings at import, so patch the constants."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def qwen2_in_cache(hub_cache: Path) -> Path:
    qwen2 = avail.hf_qwen2_dir()
    names = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    return populate_cache(hub_cache, "acme/qwen2-tok", {n: qwen2 / n for n in names})


def test_loads_hub_id_from_offline_cache(qwen2_in_cache: Path) -> None:
    tok = load_tokenizer("acme/qwen2-tok")
    assert tok.backend == "huggingface"
    assert tok.source == "acme/qwen2-tok"
    assert tok.vocab_size == 151936
    assert tok.decode(tok.encode("Hello, world! 你好")) == "Hello, world! 你好"
    # the folder's config and template came along
    assert tok.special_tokens.eos == "<|endoftext|>"
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}]).endswith("<|im_start|>assistant\n")
    assert tok.load_seconds > 0


def test_revision_by_branch_and_commit(qwen2_in_cache: Path) -> None:
    assert download_tokenizer_files("acme/qwen2-tok", revision="main") == qwen2_in_cache
    assert download_tokenizer_files("acme/qwen2-tok", revision=COMMIT) == qwen2_in_cache
    with pytest.raises(TokenizerLoadError, match="not in the local Hugging Face cache"):
        download_tokenizer_files("acme/qwen2-tok", revision="v2")


def test_repo_not_in_cache_offline_is_a_load_error(hub_cache: Path) -> None:
    with pytest.raises(TokenizerLoadError) as info:
        load_tokenizer("acme/absent")
    message = str(info.value)
    assert "'acme/absent'" in message and "HF_HUB_OFFLINE=1" in message and str(hub_cache) in message
    assert "supported formats" in message


def test_offline_env_set_after_import_is_honoured(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert hub.hub_offline()  # from the environment variable alone
    with pytest.raises(TokenizerLoadError, match="offline"):
        download_tokenizer_files("acme/absent")


def test_forced_backend_picks_its_file_in_a_hub_snapshot(hub_cache: Path) -> None:
    """A Llama-3 style repo with both tokenizer.json and a tiktoken tokenizer.model."""
    files = {"tokenizer.json": avail.hf_gpt2_dir() / "tokenizer.json", "tokenizer.model": avail.cl100k_file()}
    populate_cache(hub_cache, "acme/both", files)
    assert load_tokenizer("acme/both").backend == "huggingface"
    tiktoken_tok = load_tokenizer("acme/both", backend="tiktoken")
    assert tiktoken_tok.backend == "tiktoken"
    assert tiktoken_tok.source == "acme/both"


def test_arguments_sent_to_huggingface_hub(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The token goes through, offline means local files only, and the patterns keep weights out."""
    calls: list[dict[str, Any]] = []

    def fake_snapshot_download(repo_id: str, **kwargs: Any) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        return str(avail.hf_gpt2_dir())

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    tok = load_tokenizer("acme/private", revision="v1", token="hf_secret")
    assert tok.source == "acme/private"
    (call,) = calls
    assert call["token"] == "hf_secret" and call["revision"] == "v1" and call["local_files_only"] is True

    weights_and_docs = [
        "config.json", "model.safetensors", "model-00001-of-00002.safetensors", "pytorch_model.bin",
        "model.gguf", "consolidated.pth", "README.md", "images/logo.png",
    ]  # fmt: skip
    tokenizer_files = [
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
        "chat_template.jinja", "tokenizer.model", "tokenizer.model.v3", "spiece.model", "tekken.json",
        "qwen.tiktoken", "vocab.json", "merges.txt",
    ]  # fmt: skip
    kept = set(filter_repo_objects(weights_and_docs + tokenizer_files, allow_patterns=call["allow_patterns"]))
    assert kept == set(tokenizer_files)
    assert list(call["allow_patterns"]) == list(TOKENIZER_FILE_PATTERNS)


def test_hub_id_recognition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert looks_like_hub_id("meta-llama/Llama-3.1-8B-Instruct")
    assert looks_like_hub_id("Qwen/Qwen2.5-0.5B")
    for not_an_id in ("gpt2", "a/b/c", "org/tokenizer.json", "org/x.gguf", "./a", "org/na..me", "org/-"):
        assert not looks_like_hub_id(not_an_id), not_an_id
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not looks_like_hub_id("org/name")  # an existing path is a path
