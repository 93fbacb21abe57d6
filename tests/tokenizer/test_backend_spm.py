"""SentencePiece backend on the fixture models (unigram, BPE, Japanese) and mistral-common's
Llama-2-style models with byte fallback, checked against the sentencepiece library itself."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sentencepiece

from detok.tokenizer.base import TokenizerLoadError
from detok.tokenizer.spm import SentencePieceTokenizer, load_sentencepiece, looks_like_sentencepiece
from tests.helpers.tokenizers_available import (
    RandomIds,
    assert_byte_decoding_holds,
    cl100k_file,
    corpus_text,
    gguf_fixture,
    hf_qwen2_dir,
    llama3_tiktoken_model,
    mistral_spm,
    mistral_tekken,
    spm_fixture,
)

FIXTURES = ["botchan_en_bpe_1000", "botchan_en_unigram_1000", "kyoto_ja_unigram_8000"]
TEXTS = [
    "Hello world, this is a test.",
    "坊っちゃんは親譲りの無鉄砲で小供の時から損ばかりしている。",
    "numbers 12345 and émojis 🫨 北京",
    "new\nlines\tand tabs",
]


def _model_path(name: str) -> Path:
    return mistral_spm(1) if name == "mistral-v1" else spm_fixture(name)


@pytest.fixture(scope="module", params=[*FIXTURES, "mistral-v1"])
def model(request: pytest.FixtureRequest) -> tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor]:
    path = _model_path(request.param)
    tok = load_sentencepiece(path)
    assert isinstance(tok, SentencePieceTokenizer)
    return tok, sentencepiece.SentencePieceProcessor(model_file=str(path))


def test_sniffing_the_model_proto() -> None:
    for name in FIXTURES:
        assert looks_like_sentencepiece(spm_fixture(name).read_bytes()[:4096]), name
    for version in (1, 2, 3, 7):
        assert looks_like_sentencepiece(mistral_spm(version).read_bytes()[:4096]), version
    for other in (llama3_tiktoken_model(), cl100k_file(), mistral_tekken(), hf_qwen2_dir() / "tokenizer.json"):
        assert not looks_like_sentencepiece(other.read_bytes()[:4096]), other
    assert not looks_like_sentencepiece(gguf_fixture("llama-spm").read_bytes()[:4096])
    assert not looks_like_sentencepiece(b"")
    assert not looks_like_sentencepiece(b"\x0a\x05\x0a\x03ab")  # the piece's length overruns it
    head = spm_fixture("kyoto_ja_unigram_8000").read_bytes()
    assert not looks_like_sentencepiece(head[:8])  # not one whole piece yet
    assert looks_like_sentencepiece(head[:100])


def test_encode_matches_sentencepiece(
    model: tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor],
) -> None:
    tok, sp = model
    lines = [line for line in corpus_text().splitlines()[:400] if line.strip()]
    assert tok.encode_batch(lines) == sp.encode(lines)
    for text in TEXTS:
        assert tok.encode(text) == sp.encode(text)
        assert tok.encode(text, add_special_tokens=True) == [sp.bos_id(), *sp.encode(text)]


def test_decode_matches_sentencepiece_on_text(
    model: tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor],
) -> None:
    tok, sp = model
    compared = 0
    for text in [*TEXTS, *corpus_text().splitlines()[:200]]:
        ids = sp.encode(text)
        if sp.unk_id() in ids:  # unknown is special here (skipped), the library shows " ⁇ "
            assert tok.decode(ids) == sp.decode([i for i in ids if i != sp.unk_id()])
            continue
        assert tok.decode(ids) == sp.decode(ids), text
        compared += 1
    assert compared > 150


def test_decode_matches_sentencepiece_on_random_ids(
    model: tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor],
) -> None:
    """Ordinary pieces whose bytes are valid UTF-8 decode as the library does, except that the
    library strips the ▁ of several whitespace-only leading pieces (remove_extra_whitespaces)."""
    tok, sp = model
    draws = RandomIds(tok, seed=5)
    lone_space = {i for i in draws.ordinary if sp.id_to_piece(i).strip("\u2581") == ""}
    for _ in range(400):
        ids = draws.draw(draws.rng.randint(1, 10), specials=False)
        if ids[0] in lone_space:
            continue
        assert tok.decode(ids) == sp.decode(ids), [sp.id_to_piece(i) for i in ids]


def test_byte_decoding_claim(model: tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor]) -> None:
    tok, _ = model
    bd = tok.byte_decoding()
    assert bd is not None and bd.strip_leading_space
    assert_byte_decoding_holds(tok, seed=6, valid_utf8=True)
    assert_byte_decoding_holds(tok, seed=7, sequences=100, valid_utf8=False)


def test_control_and_unknown_pieces(model: tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor]) -> None:
    tok, sp = model
    assert tok.special_ids == {0, 1, 2}
    assert tok.special_tokens.named() == {"bos": "<s>", "eos": "</s>", "unk": "<unk>"}
    assert tok.eos_token_ids == {2}
    hello = sp.encode("Hello")
    assert tok.decode([1, *hello, 0, 2]) == "Hello"
    assert tok.decode([1, *hello, 0, 2], skip_special_tokens=False, spaces_between_special_tokens=False) == (
        "<s> Hello<unk></s>"  # the dummy-prefix space stays: the text starts with <s>
    )
    assert tok.decode([1, *hello, 2], skip_special_tokens=False) == "<s> Hello</s>"  # native: nothing inserted
    assert tok.encode("Hello</s>") == [*hello, 2]  # control text is the control token
    assert tok.encode("<unk>") == sp.encode("<unk>")  # unknown is no control: plain text


def test_token_to_id(model: tuple[SentencePieceTokenizer, sentencepiece.SentencePieceProcessor]) -> None:
    tok, _ = model
    for i in range(0, tok.vocab_size, 37):
        assert tok.token_to_id(tok.id_to_token(i)) == i  # type: ignore[arg-type]
    assert tok.token_to_id("<unk>") == 0
    assert tok.token_to_id("no-such-piece-anywhere") is None
    assert tok.id_to_token(tok.vocab_size) is None


def test_byte_fallback_pieces() -> None:
    tok = load_sentencepiece(mistral_spm(1))
    bd = tok.byte_decoding()
    assert bd is not None
    e4 = tok.token_to_id("<0xE4>")
    assert e4 is not None and bd.pieces[e4] == b"\xe4"
    ids = tok.encode("🫨")  # not in the vocabulary: four byte pieces after the ▁
    assert [tok.id_to_token(i) for i in ids] == ["▁", "<0xF0>", "<0x9F>", "<0xAB>", "<0xA8>"]
    assert tok.decode(ids[:-1]) == "\ufffd"  # a truncated sequence is one U+FFFD (maximal subpart)
    assert tok.decode(ids) == "🫨"


@pytest.mark.parametrize(
    "flags",
    [{"treat_whitespace_as_suffix": True}, {"add_dummy_prefix": False}, {"remove_extra_whitespaces": False}],
    ids=["whitespace-suffix", "no-dummy-prefix", "keep-extra-whitespace"],
)
def test_normalizer_variants_decode_like_the_library(flags: dict[str, bool]) -> None:
    """Models trained with other whitespace settings: the leading-space rule is read off the
    library, and the byte map then agrees with it (bar the documented several-leading-▁ case)."""
    lines = [line for line in corpus_text().splitlines()[:2000] if line.strip()]
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=proto, vocab_size=300, model_type="bpe", minloglevel=2, **flags
    )
    sp = sentencepiece.SentencePieceProcessor(model_proto=proto.getvalue())
    tok = SentencePieceTokenizer(sp, "trained")
    for text in ("Hello world again", "  two  spaces ", lines[5]):
        assert tok.decode(sp.encode(text)) == sp.decode(sp.encode(text))
    draws = RandomIds(tok, seed=8)
    lone_space = {i for i in draws.ordinary if sp.id_to_piece(i).strip("\u2581") == ""}
    for _ in range(300):
        ids = draws.draw(draws.rng.randint(1, 6), specials=False)
        if ids[0] not in lone_space:
            assert tok.decode(ids) == sp.decode(ids), [sp.id_to_piece(i) for i in ids]
    assert_byte_decoding_holds(tok, seed=9, sequences=50)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenizerLoadError, match="no such file"):
        load_sentencepiece(tmp_path / "missing.model")
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"\x00\x01 definitely not a protobuf" * 10)
    with pytest.raises(TokenizerLoadError, match="not a SentencePiece model"):
        load_sentencepiece(garbage)
    with pytest.raises(TokenizerLoadError, match="not a SentencePiece model"):
        load_sentencepiece(llama3_tiktoken_model())
    truncated = tmp_path / "truncated.model"
    truncated.write_bytes(spm_fixture("botchan_en_bpe_1000").read_bytes()[:3000])
    with pytest.raises(TokenizerLoadError, match="sentencepiece cannot load"):
        load_sentencepiece(truncated)
    with pytest.raises(TokenizerLoadError, match="unknown sentencepiece option"):
        load_sentencepiece(spm_fixture("botchan_en_bpe_1000"), add_dummy=True)


def test_add_bos_eos_options() -> None:
    tok = load_sentencepiece(spm_fixture("botchan_en_bpe_1000"), add_bos=False, add_eos=True)
    assert tok.encode("Hello", add_special_tokens=True) == [*tok.encode("Hello"), 2]
