"""A ByteLevel token's bytes (GPT-2's byte-to-char table inverted), against the rule spelled out one
char at a time: every char of the token maps to its byte, else the token is its own UTF-8 (as
tokenizers falls back). Control chars, Latin-1 chars outside the table and chars past it included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from detok.tokenizer.byte_pieces import bytelevel_char_to_byte, bytelevel_piece

TABLE = bytelevel_char_to_byte()


def _per_char(token: str) -> bytes:
    if all(c in TABLE for c in token):
        return bytes(TABLE[c] for c in token)
    return token.encode("utf-8")


def test_the_table_maps_256_chars_onto_the_256_bytes() -> None:
    assert sorted(TABLE.values()) == list(range(256))


def test_every_char_up_to_u_2000_alone() -> None:
    for code in range(0x2000):
        assert bytelevel_piece(chr(code)) == _per_char(chr(code)), hex(code)


@given(st.text(st.one_of(st.sampled_from(sorted(TABLE)), st.characters(max_codepoint=0x3FF),
                         st.characters(codec="utf-8")), max_size=12))
def test_mixed_tokens(token: str) -> None:
    assert bytelevel_piece(token) == _per_char(token)
