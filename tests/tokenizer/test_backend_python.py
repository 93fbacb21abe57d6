"""User Python tokenizer classes ('module:Class'), written to a temporary folder on sys.path."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import detok
from detok.tokenizer.base import TokenizerLoadError
from detok.tokenizer.hf import HFTokenizer
from detok.tokenizer.python_backend import BaseTokenizer, PythonTokenizer, load_python
from tests.helpers.tokenizers_available import corpus_text, hf_qwen2_dir

_counter = itertools.count()

BYTE_TOKENIZER = '''
from detok import BaseTokenizer

CREATED = []

class ByteTokenizer(BaseTokenizer):
    """One id per UTF-8 byte; 256 is <eos>."""
    vocab_size = 257
    eos_token = "<eos>"
    eos_token_id = 256
    special_ids = [256]

    def __init__(self, model_path):
        CREATED.append(model_path)

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, token_ids, skip_special_tokens=True):
        out = bytearray()
        for i in token_ids:
            if i == 256:
                if not skip_special_tokens:
                    out += b"<eos>"
            else:
                out.append(i)
        return out.decode("utf-8", errors="replace")

    def token_to_id(self, token):
        return 256 if token == "<eos>" else (token.encode()[0] if len(token.encode()) == 1 else None)

    def id_to_token(self, token_id):
        return "<eos>" if token_id == 256 else bytes([token_id]).decode("latin-1")
'''

QWEN_WRAPPER = '''
from pathlib import Path

import tokenizers


class QwenWrapper:
    """Not a BaseTokenizer: a plain class following the protocol, wrapping `tokenizers`."""

    def __init__(self, model_path):
        self._tok = tokenizers.Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
        self.chat_template = (Path(model_path) / "chat_template.jinja").read_text(encoding="utf-8")

    def encode(self, text):
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids, skip_special_tokens=True):
        return self._tok.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def get_vocab_size(self):
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def all_special_ids(self):
        return [i for i, t in self._tok.get_added_tokens_decoder().items() if t.special]

    @property
    def eos_token_ids(self):
        return [self._tok.token_to_id("<|im_end|>"), self._tok.token_to_id("<|endoftext|>")]

    def token_to_id(self, token):
        return self._tok.token_to_id(token)
'''


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Writes source as a fresh module on sys.path and returns its (unique) name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"user_tok_{next(_counter)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return write


def test_base_tokenizer_is_exported() -> None:
    assert detok.BaseTokenizer is BaseTokenizer


def test_byte_tokenizer_is_created_lazily_with_the_model_path(write_module: Callable[[str], str]) -> None:
    name = write_module(BYTE_TOKENIZER)
    tok = load_python(f"{name}:ByteTokenizer", model_path="/models/bytes")
    assert isinstance(tok, PythonTokenizer)
    created = sys.modules[name].CREATED
    assert created == []  # imported and checked, not instantiated
    assert tok.encode("héllo") == list("héllo".encode())
    assert created == ["/models/bytes"]
    tok.decode([104, 105])
    assert created == ["/models/bytes"]  # once


def test_byte_tokenizer_protocol(write_module: Callable[[str], str]) -> None:
    tok = load_python(module=write_module(BYTE_TOKENIZER), cls="ByteTokenizer", model_path="unused")
    ids = tok.encode("北京 🫨")
    assert tok.decode(ids) == "北京 🫨"
    assert tok.decode(ids[:-1]).endswith("\ufffd")
    assert tok.decode([*ids, 256]) == "北京 🫨"
    assert tok.decode([104, 256, 105], skip_special_tokens=False) == "h<eos>i"  # native: nothing inserted
    assert tok.encode_batch(["a", "bc"]) == [[97], [98, 99]]  # BaseTokenizer's default
    assert tok.vocab_size == 257
    assert tok.special_ids == {256}
    assert tok.eos_token_ids == {256}
    assert tok.special_tokens.eos == "<eos>"
    assert tok.token_to_id("<eos>") == 256 and tok.id_to_token(97) == "a"
    assert tok.byte_decoding() is None  # streams by window diff
    assert tok.backend == "python"


SLOW_SPACED = BYTE_TOKENIZER.replace("class ByteTokenizer(BaseTokenizer):", """class ByteTokenizer(BaseTokenizer):
    slow_special_spacing = True  # a transformers slow tokenizer's reference: specials spaced""")


def test_slow_special_spacing_is_declared_by_the_class(write_module: Callable[[str], str]) -> None:
    """Only a backend that declares it gets transformers' slow spacing, and it streams exactly."""
    tok = load_python(f"{write_module(SLOW_SPACED)}:ByteTokenizer", model_path="unused")
    assert tok.slow_special_spacing
    ids = [104, 256, 105, 256, 256]
    assert tok.decode(ids, skip_special_tokens=False) == "h <eos> i <eos> <eos>"
    assert tok.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=False) == "h<eos>i<eos><eos>"
    assert tok.decode(ids) == "hi"
    for spaces, want in ((True, "h <eos> i <eos> <eos>"), (False, "h<eos>i<eos><eos>")):
        params = detok.DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=spaces)
        stream = detok.DecodeStream(tok, [], params, ignore_eos=True)
        assert "".join(stream.step([i]).text for i in ids) + stream.finish().text == want
    plain = load_python(f"{write_module(BYTE_TOKENIZER)}:ByteTokenizer", model_path="unused")
    assert not plain.slow_special_spacing and not HFTokenizer.slow_special_spacing


def test_wrapping_the_qwen2_fixture_matches_the_hf_backend(write_module: Callable[[str], str]) -> None:
    tok = load_python(f"{write_module(QWEN_WRAPPER)}:QwenWrapper", model_path=str(hf_qwen2_dir()))
    hf = HFTokenizer.from_path(hf_qwen2_dir())
    text = corpus_text()[:3000] + " 北京欢迎你 🫨 <|im_start|>"
    ids = tok.encode(text)
    assert ids == hf.encode(text)
    assert tok.encode_batch([text, "x"]) == [ids, hf.encode("x")]  # no encode_batch: one by one
    assert tok.decode(ids) == hf.decode(ids)
    assert tok.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)
    assert tok.vocab_size == hf.vocab_size
    assert tok.special_ids == hf.special_ids
    assert tok.eos_token_ids == {hf.token_to_id("<|im_end|>"), hf.token_to_id("<|endoftext|>")}
    assert tok.id_to_token(0) is None  # the class has no id_to_token
    messages = [{"role": "user", "content": "Hi"}]
    assert tok.apply_chat_template(messages) == hf.apply_chat_template(messages)


def test_options_fill_in_what_the_class_lacks(write_module: Callable[[str], str]) -> None:
    name = write_module(
        """
        class Minimal:
            def encode(self, text):
                return [ord(c) for c in text]

            def decode(self, token_ids, skip_special_tokens=True):
                return "".join(chr(i) for i in token_ids)
        """
    )
    bare = load_python(f"{name}:Minimal")  # no model path: created with no argument
    assert bare.decode(bare.encode("ok")) == "ok"
    with pytest.raises(TokenizerLoadError, match="vocab_size"):
        _ = bare.vocab_size
    assert bare.special_ids == frozenset() and bare.eos_token_ids == frozenset()
    tok = load_python(f"{name}:Minimal", vocab_size=0x110000, eos_token_ids=[3], special_ids=[3])
    assert tok.vocab_size == 0x110000 and tok.eos_token_ids == {3} and tok.special_ids == {3}
    with pytest.raises(TokenizerLoadError, match="unknown python tokenizer option"):
        load_python(f"{name}:Minimal", vocab=5)


def test_decode_must_return_text(write_module: Callable[[str], str]) -> None:
    name = write_module(
        """
        class Bytes:
            def encode(self, text):
                return list(text.encode())

            def decode(self, token_ids, skip_special_tokens=True):
                return bytes(token_ids)
        """
    )
    with pytest.raises(TypeError, match="not str"):
        load_python(f"{name}:Bytes").decode([104])


@pytest.mark.parametrize("spec", ["no_colon_here", ":Class", "module:", "a:b:c"])
def test_malformed_spec(spec: str) -> None:
    with pytest.raises(TokenizerLoadError, match="package.module:ClassName"):
        load_python(spec)


def test_spec_and_module_are_exclusive() -> None:
    with pytest.raises(TokenizerLoadError, match="not both"):
        load_python("a:B", module="a", cls="B")
    with pytest.raises(TokenizerLoadError, match="needs both"):
        load_python(module="a")


def test_missing_module() -> None:
    with pytest.raises(TokenizerLoadError, match="module 'no_such_module_xyz' not found"):
        load_python("no_such_module_xyz:Tok")


def test_module_that_fails_to_import(write_module: Callable[[str], str]) -> None:
    broken = write_module("import no_such_dependency_xyz\n")
    with pytest.raises(TokenizerLoadError, match="importing .* failed: ModuleNotFoundError"):
        load_python(f"{broken}:Tok")
    syntax = write_module("def broken(:\n")
    with pytest.raises(TokenizerLoadError, match="SyntaxError"):
        load_python(f"{syntax}:Tok")


def test_missing_or_wrong_class(write_module: Callable[[str], str]) -> None:
    name = write_module("NOT_A_CLASS = 3\n")
    with pytest.raises(TokenizerLoadError, match="has no attribute 'Missing'"):
        load_python(f"{name}:Missing")
    with pytest.raises(TokenizerLoadError, match="not a class"):
        load_python(f"{name}:NOT_A_CLASS")


def test_missing_and_unimplemented_methods(write_module: Callable[[str], str]) -> None:
    name = write_module(
        """
        from detok import BaseTokenizer

        class NoDecode:
            def encode(self, text):
                return []

        class OnlyBase(BaseTokenizer):
            def decode(self, token_ids, skip_special_tokens=True):
                return ""

        class DecodeWithoutSkip:
            def encode(self, text):
                return []

            def decode(self, token_ids):
                return ""

        class StaticMethods:
            @staticmethod
            def encode(text):
                return [1]

            @staticmethod
            def decode(token_ids, skip_special_tokens=True):
                return "x"
        """
    )
    with pytest.raises(TokenizerLoadError, match="no decode"):
        load_python(f"{name}:NoDecode")
    with pytest.raises(TokenizerLoadError, match="inherits BaseTokenizer.encode"):
        load_python(f"{name}:OnlyBase")
    with pytest.raises(TokenizerLoadError, match="cannot be called as decode"):
        load_python(f"{name}:DecodeWithoutSkip")
    assert load_python(f"{name}:StaticMethods").encode("anything") == [1]


def test_constructor_that_raises_is_a_load_error_at_first_use(write_module: Callable[[str], str]) -> None:
    name = write_module(
        """
        class Exploding:
            def __init__(self, model_path):
                raise FileNotFoundError(f"no vocabulary in {model_path}")

            def encode(self, text):
                return []

            def decode(self, token_ids, skip_special_tokens=True):
                return ""
        """
    )
    tok = load_python(f"{name}:Exploding", model_path="/nowhere")  # the check does not instantiate
    with pytest.raises(TokenizerLoadError, match="FileNotFoundError: no vocabulary in /nowhere") as err:
        tok.encode("x")
    assert err.value.source == f"{name}:Exploding"
