"""An ASCII piece's ids by the tokenizer's own split pattern in Python's `re` (`AsciiPieces`) are
exactly `tokenizers`' ids, on real vocabularies: every ASCII string of up to 2 characters, every
3-character string over the characters the pattern treats differently, and random ASCII text
(hypothesis). The translation refuses constructs outside its subset; tokenizers whose encode is
not Split-then-ByteLevel BPE get none; non-ASCII, over-long pieces and empty matches are left to
`tokenizers`; the byte table is `ByteLevel`'s alphabet."""

from __future__ import annotations

import itertools
import json
import pickle
from collections.abc import Callable, Iterator

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

import tests.helpers.tokenizers_available as ta
from detok.tokenizer import ascii_pieces
from detok.tokenizer.ascii_pieces import ASCII_PIECE_MAX_CHARS, AsciiPieces, ascii_pattern

_PATHS = {
    "qwen2": lambda: ta.hf_qwen2_dir() / "tokenizer.json",
    "llama3": ta.llama3_tokenizer_json,
    "gpt-2": lambda: ta.hf_gpt2_dir() / "tokenizer.json",
    "deepseek": lambda: ta.deepseek_dir() / "tokenizer.json",
}
_FAST = ("qwen2", "llama3")
_LOADED: dict[str, tokenizers.Tokenizer] = {}


def _hf(name: str) -> tokenizers.Tokenizer:
    if name not in _LOADED:
        _LOADED[name] = tokenizers.Tokenizer.from_file(str(_PATHS[name]()))
    return _LOADED[name]


_FAST_LOADED: dict[str, AsciiPieces | None] = {}


def _fast(name: str) -> AsciiPieces | None:
    if name not in _FAST_LOADED:
        _FAST_LOADED[name] = AsciiPieces.of(_hf(name))
    return _FAST_LOADED[name]


def _want(name: str, text: str) -> list[int]:
    return _hf(name).encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("name", list(_PATHS))
def test_which_tokenizers_get_the_ascii_encoder(name: str) -> None:
    assert (AsciiPieces.of(_hf(name)) is not None) == (name in _FAST)


@pytest.mark.parametrize("name", _FAST)
def test_every_ascii_string_of_up_to_two_characters(name: str) -> None:
    fast = AsciiPieces.of(_hf(name))
    assert fast is not None
    for n in (1, 2):
        for chars in itertools.product(map(chr, range(128)), repeat=n):
            text = "".join(chars)
            assert fast.encode(text) == _want(name, text), repr(text)


@pytest.mark.parametrize("name", _FAST)
def test_every_three_characters_of_the_patterns_classes(name: str) -> None:
    fast = AsciiPieces.of(_hf(name))
    assert fast is not None
    # a letter of each case, digits, each whitespace kind, the separators \s leaves out, quotes,
    # the contractions' letters, punctuation, a control
    alphabet = "aZ1 \t\n\r\x0b\x0c\x1c\x1f'sSdD.-\x00"
    for chars in itertools.product(alphabet, repeat=3):
        text = "".join(chars)
        assert fast.encode(text) == _want(name, text), repr(text)


_ASCII_TEXT = st.lists(st.one_of(st.characters(max_codepoint=127), st.sampled_from([" ", "  ", "\n", "'s", "'LL", "1234"])),
                       max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_ASCII_TEXT, name=st.sampled_from(_FAST))
def test_random_ascii_text(text: str, name: str) -> None:
    fast = _fast(name)
    assert fast is not None
    assert fast.encode(text) == _want(name, text)
    assert fast.encode(text) == _want(name, text)  # (the second time from the word cache)


def test_long_runs_and_numbers() -> None:
    fast = AsciiPieces.of(_hf("llama3"))
    assert fast is not None
    for text in [" " * 300 + "x", "\n" * 50 + " \t " * 40, "1" * 100, "a" * 500, "It'S we'Re I'M they'VE " * 20,
                 "x" * ASCII_PIECE_MAX_CHARS]:
        assert fast.encode(text) == _want("llama3", text)


def test_non_ascii_and_over_long_pieces_are_left_to_tokenizers() -> None:
    fast = AsciiPieces.of(_hf("qwen2"))
    assert fast is not None
    assert fast.encode("café") is None and fast.encode("x" * (ASCII_PIECE_MAX_CHARS + 1)) is None


@pytest.mark.parametrize("regex", [r"\p{Lu}+", r".+", r"\d+", r"(?>a)", r"^a", r"a$", r"[]a]", r"[[a]]", r"\X", r"\w+",
                                   r"a\b", r"[a", r"a]", r"(?<=a)b", r"\p{L}+(?", r"a{x}"])
def test_constructs_outside_the_subset_are_refused(regex: str) -> None:
    assert ascii_pattern(regex) is None


def test_the_known_patterns_translate() -> None:
    pattern = ascii_pattern(r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|(a)|\s+(?!\S)")
    assert pattern is not None and pattern.pattern == r"[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}|(?:a)|\s+(?!\S)"
    assert pattern.findall("ab 12345  c") == ["ab", "123", "45", " ", " c"]


@pytest.fixture
def edited() -> Iterator[Callable[[object], tokenizers.Tokenizer]]:
    """`edited(edit)`: Qwen2's tokenizer with `edit` applied to the JSON of its pre-tokenizer and
    normalizer (the parts of tokenizer.json that decide the split), set on one tokenizer of this
    module's (restored after the test): a whole tokenizer.json round trip per case costs seconds."""
    tok = _EDITED.get("qwen2")
    if tok is None:
        tok = _EDITED["qwen2"] = tokenizers.Tokenizer.from_file(str(_PATHS["qwen2"]()))
    original, normalizer = tok.pre_tokenizer, tok.normalizer

    def apply(edit: object) -> tokenizers.Tokenizer:
        spec = {"pre_tokenizer": json.loads(original.__getstate__()), "normalizer": None}
        edit(spec)  # type: ignore[operator]
        tok.pre_tokenizer = _component(original, spec["pre_tokenizer"])
        if spec["normalizer"] is not None:
            tok.normalizer = _component(tokenizers.normalizers.NFC(), spec["normalizer"])
        return tok

    yield apply
    tok.pre_tokenizer, tok.normalizer = original, normalizer
    tok.no_truncation()


_EDITED: dict[str, tokenizers.Tokenizer] = {}


def _component(like: object, spec: dict) -> object:  # type: ignore[type-arg]
    """A tokenizers component from its JSON (as in tokenizer.json): a copy of `like` given that state."""
    new = pickle.loads(pickle.dumps(like))
    new.__setstate__(json.dumps(spec).encode())
    assert json.loads(new.__getstate__()) == spec, spec  # (the whole edit took)
    return new


def test_an_edited_component_is_the_tokenizer_json_one(edited) -> None:  # type: ignore[no-untyped-def]
    """`edited` gives the tokenizer that tokenizer.json with the same edit makes."""
    def edit(spec: dict) -> None:  # type: ignore[type-arg]
        spec["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": r"\p{L}+|\p{N}{1,2}|'s"}
        spec["normalizer"] = {"type": "NFC"}

    spec = json.loads(_hf("qwen2").to_str())
    edit(spec)
    whole = tokenizers.Tokenizer.from_str(json.dumps(spec))
    part = edited(edit)
    assert part.get_vocab_size() == whole.get_vocab_size()  # (the model: the same file's)
    for name in ("pre_tokenizer", "normalizer", "decoder", "post_processor"):
        assert getattr(part, name).__getstate__() == getattr(whole, name).__getstate__(), name
    for text in ["ab, cd!  12345 ", "it's 7 o'clock", "Cafe\u0301 a\n\nb"]:
        assert part.encode(text).ids == whole.encode(text).ids


def test_text_between_the_matches_is_split_as_tokenizers_splits_it(edited) -> None:  # type: ignore[no-untyped-def]
    def edit(spec: dict) -> None:  # type: ignore[type-arg]
        spec["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": r"\p{L}+|\p{N}{1,2}|'s"}

    tok = edited(edit)
    fast = AsciiPieces.of(tok)
    assert fast is not None
    for text in ["ab, cd!  12345 ", "  x", "it's 7 o'clock", "", "...", "a\n\nb"]:
        assert fast.encode(text) == tok.encode(text, add_special_tokens=False).ids, repr(text)


@pytest.mark.parametrize("change", ["prefix space", "byte-level regex", "removed behaviour", "inverted", "normalizer",
                                    "truncation", "three parts", "string pattern", "empty-matching pattern"])
def test_a_tokenizer_outside_the_rule_gets_none_or_stays_exact(change: str, edited) -> None:  # type: ignore[no-untyped-def]
    def edit(spec: dict) -> None:  # type: ignore[type-arg]
        split, level = spec["pre_tokenizer"]["pretokenizers"]
        if change == "prefix space":
            level["add_prefix_space"] = True
        elif change == "byte-level regex":
            level["use_regex"] = True
        elif change == "removed behaviour":
            split["behavior"] = "Removed"
        elif change == "inverted":
            split["invert"] = True
        elif change == "normalizer":
            spec["normalizer"] = {"type": "NFC"}
        elif change == "three parts":
            spec["pre_tokenizer"]["pretokenizers"].append({"type": "Digits", "individual_digits": True})
        elif change == "string pattern":
            split["pattern"] = {"String": " "}
        elif change == "empty-matching pattern":
            split["pattern"] = {"Regex": r"\p{L}*"}

    tok = edited(edit)
    if change == "truncation":
        tok.enable_truncation(8)
    fast = AsciiPieces.of(tok)
    if change == "empty-matching pattern":  # accepted, but a piece with an empty match is tokenizers'
        assert fast is not None and fast.encode("ab 1") is None and fast.encode("ab") is None
    else:
        assert fast is None


def test_the_byte_table_is_byte_levels_alphabet() -> None:
    table = ascii_pieces._bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert set(table.values()) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"
