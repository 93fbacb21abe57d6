"""mistral-common backend on its own data files: SentencePiece v1 / v3 / v7 and Tekken."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mistral_common")

from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

from detok.tokenizer.base import Tokenizer, TokenizerLoadError  # noqa: E402
from detok.tokenizer.chat import ChatTemplateError  # noqa: E402
from detok.tokenizer.mistral import (  # noqa: E402
    MistralSentencePieceTokenizer,
    MistralTekkenTokenizer,
    load_mistral,
    looks_like_tekken,
)
from tests.helpers.tokenizers_available import (  # noqa: E402
    RandomIds,
    assert_byte_decoding_holds,
    corpus_text,
    hf_qwen2_dir,
    llama3_tiktoken_model,
    mistral_spm,
    mistral_tekken,
)

KINDS = ["v1", "v3", "v7", "tekken"]
TEXTS = [
    "Hello world, this is a test.",
    "  leading spaces and   more ",
    "北京欢迎你 🫨 emoji, ÜNÏCÖDÉ",
    "code:\n\tdef f(x):\n\t\treturn x\n",
    "numbers 1234567890",
]
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello there, 北京?"},
    {"role": "assistant", "content": "Hi! 🫨"},
    {"role": "user", "content": "Again  please"},
]


def _path(kind: str) -> Path:
    return mistral_tekken() if kind == "tekken" else mistral_spm(int(kind[1:]))


@pytest.fixture(scope="module", params=KINDS)
def loaded(request: pytest.FixtureRequest) -> tuple[Tokenizer, MistralTokenizer]:
    tok = load_mistral(_path(request.param))
    assert isinstance(tok, (MistralSentencePieceTokenizer, MistralTekkenTokenizer))
    return tok, tok.mistral_tokenizer


def test_types_and_specials(loaded: tuple[Tokenizer, MistralTokenizer]) -> None:
    tok, ref = loaded
    inner = ref.instruct_tokenizer.tokenizer
    expected = MistralTekkenTokenizer if "tekken" in tok.source else MistralSentencePieceTokenizer
    assert isinstance(tok, expected)
    assert tok.backend == "mistral"
    assert tok.vocab_size == inner.n_words
    assert tok.eos_token_ids == {inner.eos_id}
    assert tok.special_tokens.bos == "<s>" and tok.special_tokens.eos == "</s>"
    if not tok.source.endswith(".v1"):  # v1 has no [INST] control token: it writes the text
        assert tok.token_to_id("[INST]") == inner.get_special_token("[INST]") == 3
    assert tok.encode("Hi", add_special_tokens=True)[0] == inner.bos_id


def test_encode_matches_mistral_common(loaded: tuple[Tokenizer, MistralTokenizer]) -> None:
    tok, ref = loaded
    inner = ref.instruct_tokenizer.tokenizer
    for text in [*TEXTS, corpus_text()[:5000]]:
        assert tok.encode(text) == inner.encode(text, bos=False, eos=False), text[:40]


def test_decode_matches_mistral_common(loaded: tuple[Tokenizer, MistralTokenizer]) -> None:
    tok, ref = loaded
    for text in TEXTS:
        ids = tok.encode(text)
        assert tok.decode(ids) == ref.decode(ids)
    draws = RandomIds(tok, seed=11)
    for _ in range(200):
        ids = draws.draw(draws.rng.randint(1, 8), specials=False)
        if tok.id_to_token(ids[0]) in ("▁", "▁▁"):
            continue  # sentencepiece strips several leading whitespace pieces (see detok.tokenizer.spm)
        assert tok.decode(ids) == ref.decode(ids), [tok.id_to_token(i) for i in ids]


def test_byte_decoding_claim(loaded: tuple[Tokenizer, MistralTokenizer]) -> None:
    tok, _ = loaded
    assert_byte_decoding_holds(tok, seed=12, sequences=200)
    assert_byte_decoding_holds(tok, seed=13, sequences=100, valid_utf8=False)


def test_chat_text_encodes_back_to_mistral_tokens(loaded: tuple[Tokenizer, MistralTokenizer]) -> None:
    tok, _ = loaded
    assert isinstance(tok, (MistralSentencePieceTokenizer, MistralTekkenTokenizer))
    ids = tok.encode_chat(CHAT)
    text = tok.apply_chat_template(CHAT)
    assert "Hello there, 北京?" in text and "[INST]" in text and text.startswith("<s>")
    assert tok.encode(text) == ids


def test_chat_with_tools_and_continuation() -> None:
    tok = load_mistral(mistral_spm(7))
    assert isinstance(tok, MistralSentencePieceTokenizer)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    text = tok.apply_chat_template([{"role": "user", "content": "Weather in Paris?"}], tools=tools)
    assert "[AVAILABLE_TOOLS]" in text and "get_weather" in text
    assert tok.encode(text) == tok.encode_chat([{"role": "user", "content": "Weather in Paris?"}], tools=tools)
    prefix = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}]
    continued = tok.apply_chat_template(prefix, add_generation_prompt=False, continue_final_message=True)
    assert continued.endswith("1, 2,")


def test_invalid_chat_is_a_chat_template_error() -> None:
    tok = load_mistral(mistral_spm(3))
    with pytest.raises(ChatTemplateError, match="mistral-common"):
        tok.apply_chat_template([{"role": "assistant", "content": "I start"}, {"role": "assistant", "content": "x"}])


def test_an_explicit_jinja_template_takes_over() -> None:
    tok = load_mistral(mistral_spm(3))
    tok.set_chat_template("{% for m in messages %}{{ m['content'] }}|{% endfor %}")
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi|"


def test_looks_like_tekken() -> None:
    assert looks_like_tekken(json.loads(mistral_tekken("240718").read_text(encoding="utf-8")))
    assert not looks_like_tekken(json.loads((hf_qwen2_dir() / "tokenizer.json").read_text(encoding="utf-8")))
    assert not looks_like_tekken({})
    assert not looks_like_tekken({"config": {"pattern": "x"}, "vocab": []})


def test_file_names_mistral_common_would_not_recognise(tmp_path: Path) -> None:
    odd = tmp_path / "weights.bin"
    odd.write_bytes(mistral_spm(3).read_bytes())
    tok = load_mistral(odd, version="v3")
    assert tok.encode("[INST]") == [3]
    assert tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))[:2] == [1, 3]


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenizerLoadError, match="no such file"):
        load_mistral(tmp_path / "tekken.json")
    bad_json = tmp_path / "tekken.json"
    bad_json.write_text('{"config": {}, "vocab": [', encoding="utf-8")
    with pytest.raises(TokenizerLoadError, match="not a Tekken tokenizer file"):
        load_mistral(bad_json)
    with pytest.raises(TokenizerLoadError, match="not a SentencePiece model"):
        load_mistral(llama3_tiktoken_model())
    with pytest.raises(TokenizerLoadError, match="unknown mistral option"):
        load_mistral(mistral_spm(1), mode="strict")
    with pytest.raises(TokenizerLoadError, match="version option is for SentencePiece"):
        load_mistral(bad_json, version="v3")


def test_missing_mistral_common_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    path = mistral_spm(1)
    for name in list(sys.modules):
        if name == "mistral_common" or name.startswith("mistral_common."):
            monkeypatch.setitem(sys.modules, name, None)  # makes `import mistral_common...` fail
    with pytest.raises(TokenizerLoadError, match=r"pip install 'detok\[mistral\]'"):
        load_mistral(path)
