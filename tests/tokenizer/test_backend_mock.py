"""The mock tokenizer: deterministic, the whole protocol, a byte map that holds."""

from __future__ import annotations

import pytest

from detok.tokenizer.base import TokenizerLoadError
from detok.tokenizer.mock import BOS_ID, EOS_ID, FIRST_BYTE_ID, VOCAB_SIZE, MockTokenizer, load_mock
from tests.helpers.tokenizers_available import assert_byte_decoding_holds


@pytest.fixture(scope="module")
def mock() -> MockTokenizer:
    tok = load_mock()
    assert isinstance(tok, MockTokenizer)
    return tok


def test_words_and_bytes(mock: MockTokenizer) -> None:
    assert mock.encode("Hello world") == [3, 4]
    assert mock.encode("Hello 🫨") == [3, *(FIRST_BYTE_ID + b for b in " 🫨".encode())]
    for text in ("Hello world", "this is a test", "北京 欢迎 你 🫨 unknown-word", "a"):
        assert mock.decode(mock.encode(text)) == text
    assert mock.decode(mock.encode("  spaced   out  ")) == "spaced out"  # whitespace collapses


def test_incomplete_bytes_are_lossy(mock: MockTokenizer) -> None:
    ids = mock.encode("🫨")
    assert mock.decode(ids[:-1]) == "\ufffd"
    assert mock.decode(ids) == "🫨"


def test_specials(mock: MockTokenizer) -> None:
    ids = mock.encode("Hello <eos>", add_special_tokens=True)
    assert ids == [BOS_ID, 3, EOS_ID]
    assert mock.decode(ids) == "Hello"
    assert mock.decode(ids, skip_special_tokens=False) == "<bos> Hello <eos>"
    assert mock.special_ids == {0, 1, 2}
    assert mock.eos_token_ids == {EOS_ID}
    assert mock.special_tokens.named() == {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>"}


def test_vocabulary(mock: MockTokenizer) -> None:
    assert mock.vocab_size == VOCAB_SIZE == len(mock.byte_decoding().pieces)
    for i in range(VOCAB_SIZE):
        assert mock.token_to_id(mock.id_to_token(i)) == i  # type: ignore[arg-type]
    assert mock.id_to_token(VOCAB_SIZE) is None
    assert mock.token_to_id("nope") is None
    assert mock.decode([3, VOCAB_SIZE + 5, 4]) == "Hello world"  # out-of-range ids decode to nothing


def test_byte_decoding_claim(mock: MockTokenizer) -> None:
    assert_byte_decoding_holds(mock, seed=21, sequences=300)
    assert_byte_decoding_holds(mock, seed=22, sequences=300, valid_utf8=False)


def test_chat_template(mock: MockTokenizer) -> None:
    text = mock.apply_chat_template([{"role": "user", "content": "Hello world"}])
    assert text == "<bos> user: Hello world <eos> <bos> assistant:"
    assert mock.encode(text)[:2] == [BOS_ID, *mock.encode("user:")[:1]]


def test_deterministic_and_batch(mock: MockTokenizer) -> None:
    assert load_mock().encode("Hello test 北京") == mock.encode("Hello test 北京")
    assert mock.encode_batch(["Hello", "world"]) == [[3], [4]]


def test_no_options() -> None:
    with pytest.raises(TokenizerLoadError, match="no options"):
        load_mock(vocab_size=10)
