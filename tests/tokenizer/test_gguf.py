"""GGUF backend on llama.cpp's own vocabulary fixtures and test vectors, on UGM / SPM files written
here with gguf.GGUFWriter from the SentencePiece fixtures (checked against sentencepiece itself), and
on broken files."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest
import sentencepiece
import tokenizers

import tests.helpers.stream_roster as stream_roster
from detok.stream.strategy import verify_byte_decoding
from detok.tokenizer.base import TokenizerLoadError
from detok.tokenizer.gguf_backend import GGUFTokenizer, is_gguf, load_gguf
from detok.tokenizer.gguf_metadata import GGUFFormatError, read_gguf_metadata
from tests.helpers.tokenizers_available import (
    assert_byte_decoding_holds,
    corpus_text,
    gguf_fixture,
    gguf_vectors_base,
    hf_gpt2_dir,
    hf_qwen2_dir,
    llama3_tokenizer_json,
    spm_fixture,
)

VOCABS = ["bert-bge", "deepseek-llm", "gemma-4", "gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2"]
# llama.cpp's test vectors reproduced per file (all of them); a regression lowers a count
VECTORS_PASSED = {name: 46 for name in VOCABS}
SEPARATOR = "\n__ggml_vocab_test__\n"
JAPANESE = [
    "吾輩は猫である。名前はまだ無い。",
    "どこで生れたかとんと見当がつかぬ。",
    "京都大学の学生です。東京タワーは1958年に完成した。",
    "ｶﾀｶﾅ　全角スペース　ＡＢＣ①②③",
    "親譲りの無鉄砲で小供の時から損ばかりしている。",
    "  前後の  空白と　改行\nそしてタブ\t",
]


def vocab_tests(name: str) -> list[tuple[str, list[int]]]:
    path = gguf_vectors_base(name)
    inputs = Path(f"{path}.inp").read_text(encoding="utf-8").split(SEPARATOR)
    outputs = Path(f"{path}.out").read_text(encoding="utf-8").split("\n")
    if inputs[-1] == "":  # llama.cpp's older files end with the separator, Gemma 4's does not
        inputs.pop()
    assert outputs[-1] == "" and len(inputs) == len(outputs) - 1
    return [(text, [int(x) for x in line.split()]) for text, line in zip(inputs, outputs)]


_loaded: dict[str, GGUFTokenizer] = {}


def loaded(name: str) -> GGUFTokenizer:
    """One tokenizer per fixture file for the whole test session, shared with the stream tests
    (the biggest load, Gemma 4's 262K vocabulary, takes ~3 s)."""
    if name not in _loaded:
        tok = stream_roster.get(f"gguf-{name}")
        assert isinstance(tok, GGUFTokenizer)
        _loaded[name] = tok
    return _loaded[name]


@pytest.fixture(params=VOCABS)
def vocab(request: pytest.FixtureRequest) -> tuple[str, GGUFTokenizer]:
    return request.param, loaded(request.param)


# ---- llama.cpp's test vectors and decode -----------------------------------------------------
def test_encode_reproduces_llama_cpp_vectors(vocab: tuple[str, GGUFTokenizer]) -> None:
    name, tok = vocab
    cases = vocab_tests(name)
    failed = [(text[:40], want, tok.encode(text)) for text, want in cases if tok.encode(text) != want]
    assert len(cases) - len(failed) >= VECTORS_PASSED[name], failed[:3]
    assert tok.backend == "gguf" and tok.vocab_type == {"bert-bge": "wpm", "llama-spm": "spm", "phi-3": "spm"}.get(
        name, "bpe"
    )


def test_decode_gives_back_the_text(vocab: tuple[str, GGUFTokenizer]) -> None:
    name, tok = vocab
    texts = [text for text, _ in vocab_tests(name)] + [corpus_text()[:20000]]
    if name == "bert-bge":  # WordPiece lower-cases, splits punctuation and loses whitespace
        assert tok.decode(tok.encode("Hello World!")) == "hello world!"
        assert tok.decode(tok.encode("  ied 4 ½ months")) == "ied 4 ½ months"
        return
    for text in texts:
        assert tok.decode(tok.encode(text)) == text, text[:60]
        assert tok.decode(tok.encode(text, add_special_tokens=True)) == text, text[:60]


def test_byte_map_is_the_decode(vocab: tuple[str, GGUFTokenizer]) -> None:
    name, tok = vocab
    bd = tok.byte_decoding()
    if name == "bert-bge":
        assert bd is None  # WordPiece: the stream layer diffs windows
        return
    assert verify_byte_decoding(tok, bd) is None
    assert_byte_decoding_holds(tok, seed=7, sequences=200, valid_utf8=False)


@pytest.mark.parametrize("name", ["gpt-2", "qwen2"])
def test_same_as_the_hf_tokenizer_converted_from_the_same_file(name: str) -> None:
    tok = loaded(name)
    ref = tokenizers.Tokenizer.from_file(str((hf_gpt2_dir() if name == "gpt-2" else hf_qwen2_dir()) / "tokenizer.json"))
    text = corpus_text()[:60000]
    assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
    rng = random.Random(3)
    for _ in range(300):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 30))]
        for skip in (True, False):
            assert tok.decode(ids, skip) == ref.decode(ids, skip), ids


def test_llama_bpe_matches_llama3_tokenizer_json() -> None:
    tok = loaded("llama-bpe")
    ref = tokenizers.Tokenizer.from_file(str(llama3_tokenizer_json()))
    text = corpus_text()[:60000]
    assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
    sample = "Hello<|eot_id|> world\n\n  tabs\t and 12345 numbers"
    assert tok.encode(sample, add_special_tokens=True) == [128000, *ref.encode(sample).ids]  # llama.cpp adds bos


def test_user_defined_tokens_decode_as_their_text() -> None:
    """deepseek-llm stores 'ø' as a user-defined token: llama.cpp prints it raw, where HF's ByteLevel
    decoder would give U+FFFD."""
    tok = loaded("deepseek-llm")
    ids = tok.encode("Smørrebrød ø")
    assert tok.token_to_id("ø") in ids
    assert tok.decode(ids) == "Smørrebrød ø"


# ---- special tokens, add_special_tokens, chat template --------------------------------------
def test_special_tokens_from_metadata() -> None:
    spm = loaded("llama-spm")
    assert (spm.special_tokens.bos, spm.special_tokens.eos, spm.special_tokens.unk) == ("<s>", "</s>", "<unk>")
    assert spm.special_ids == {0, 1, 2} and spm.eos_token_ids == {2}
    assert spm.encode("Hello world", add_special_tokens=True) == [1, 15043, 3186]
    assert spm.decode([1, 15043, 3186]) == "Hello world"
    assert spm.decode([1, 15043, 3186], skip_special_tokens=False) == "<s> Hello world"

    phi3 = loaded("phi-3")
    assert phi3.special_tokens.eos == "<|endoftext|>" and phi3.special_tokens.pad == "<|endoftext|>"
    assert phi3.eos_token_ids == {32000, 32007}  # <|end|> ends a turn, as in llama.cpp's end-of-generation set
    assert 32007 in phi3.special_ids and 2 not in phi3.special_ids  # '</s>' is USER_DEFINED in this file
    assert phi3.decode([15043, 2]) == "Hello</s>"
    assert phi3.chat_template is not None and phi3.chat_template.startswith("{{ bos_token }}")
    rendered = phi3.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert rendered.startswith("<s><|user|>\nHi<|end|>\n<|assistant|>")

    bert = loaded("bert-bge")
    named = bert.special_tokens.named()
    assert named == {"bos": "[CLS]", "unk": "[UNK]", "pad": "[PAD]", "sep": "[SEP]", "cls": "[CLS]", "mask": "[MASK]"}
    assert bert.encode("Hello world", add_special_tokens=True) == [101, 7592, 2088, 102]

    llama3 = loaded("llama-bpe")
    assert llama3.encode("Hi", add_special_tokens=True)[0] == 128000
    assert llama3.eos_token_ids == {128001, 128009}
    assert loaded("gpt-2").encode("Hi", add_special_tokens=True) == loaded("gpt-2").encode("Hi")
    qwen2 = loaded("qwen2")
    assert qwen2.eos_token_ids == {151643, 151645}
    assert qwen2.special_tokens.additional == ("<|im_start|>", "<|im_end|>")
    assert qwen2.encode("<|im_start|>user") == [151644, 872]


def test_options_source_and_chat_template(tmp_path: Path) -> None:
    path = gguf_fixture("llama-spm")
    tok = load_gguf(path, source="llama", chat_template="{{ messages[0]['content'] }}!")
    assert tok.source == "llama" and tok.chat_template == "{{ messages[0]['content'] }}!"
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "x!"
    assert loaded("llama-spm").chat_template is None
    assert tok.load_seconds > 0 and tok.info.backend == "gguf"


# ---- the metadata reader ----------------------------------------------------------------------
def test_is_gguf() -> None:
    assert is_gguf(gguf_fixture("gpt-2").read_bytes()[:16])
    assert not is_gguf(b"") and not is_gguf(b"GGU") and not is_gguf(b'{"version": 1}')


def test_metadata_reader_agrees_with_gguf_reader(tmp_path: Path) -> None:
    every_type = gguf.GGUFWriter(tmp_path / "types.gguf", arch="test")
    for name in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"):
        getattr(every_type, f"add_{name}")(f"t.{name}", 7)
    every_type.add_float32("t.f32", 0.25)
    every_type.add_float64("t.f64", -1.5)
    every_type.add_bool("t.bool", True)
    every_type.add_string("t.str", "héllo ▁")
    every_type.add_array("t.strs", ["a", "", "ø b"])
    every_type.add_array("t.ints", [1, -2, 3])
    every_type.add_array("t.floats", [0.5, -3.0])
    every_type.add_array("t.bytes", b"\x00\xff\x10")
    for writer in (every_type,):
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
    # GGUFReader takes 20 s on a 32k vocabulary and 5 s on a charsmap: small files only
    spm = write_ugm_gguf(spm_fixture("botchan_en_bpe_1000"), tmp_path / "spm.gguf", vocab_model="llama")[1]
    for path in (tmp_path / "types.gguf", spm):
        ours = read_gguf_metadata(path)
        fields = {k: f for k, f in gguf.GGUFReader(path).fields.items() if not k.startswith("GGUF.")}
        assert ours.keys() == fields.keys()
        for key, field in fields.items():
            value = ours[key]
            assert (value.tolist() if hasattr(value, "tolist") else value) == field.contents(), key
    assert read_gguf_metadata(tmp_path / "types.gguf")["t.bytes"].tobytes() == b"\x00\xff\x10"



@pytest.mark.parametrize("alignment", [None, 64])
def test_tensor_layout_agrees_with_gguf_reader(tmp_path: Path, alignment: int | None) -> None:
    """read_gguf_layout's names, dimensions, types and offsets are GGUFReader's (odd sizes, so the
    data section's alignment padding counts; with and without general.alignment)."""
    from detok.tokenizer.gguf_metadata import read_gguf_layout

    path = tmp_path / "tensors.gguf"
    writer = gguf.GGUFWriter(path, arch="llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    rng = np.random.default_rng(0)
    for name, shape in (("a.weight", (3,)), ("b.weight", (5, 7)), ("c.weight", (2, 3, 4))):
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    writer.add_tensor("q.weight", gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32),
                                                       gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    metadata, infos = read_gguf_layout(path)
    reader = gguf.GGUFReader(path)
    assert metadata == read_gguf_metadata(path)
    assert [(t.name, t.dims, t.ggml_type, t.offset) for t in infos] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset)) for t in reader.tensors]
    raw = path.read_bytes()
    for ours, theirs in zip(infos, reader.tensors):
        assert raw[ours.offset : ours.offset + theirs.n_bytes] == theirs.data.tobytes(), ours.name
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(raw[: infos[0].offset - 40])  # inside the tensor infos
    with pytest.raises(GGUFFormatError, match="truncated"):
        read_gguf_layout(truncated)

# ---- broken input ------------------------------------------------------------------------------
def write_gguf(path: Path, **metadata: object) -> Path:
    writer = gguf.GGUFWriter(path, arch="llama")
    for key, value in metadata.items():
        key = "tokenizer.ggml." + key
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)  # type: ignore[arg-type]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.write_bytes(gguf_fixture("llama-spm").read_bytes()[:300_000]), "truncated"),
        (lambda p: p.write_bytes(gguf_fixture("llama-spm").read_bytes()[:6]), "truncated"),
        (lambda p: p.write_text("not a gguf file at all"), "no 'GGUF' magic"),
        (lambda p: p.write_bytes(b""), "empty"),
        (lambda p: p.write_bytes(b"GGUF" + struct.pack("<I", 99) + bytes(16)), "unsupported GGUF version 99"),
        (lambda p: write_gguf(p, model="rwkv", tokens=["a", "b"]), "unsupported vocabulary type"),
        (lambda p: write_gguf(p, model="gpt2", pre="mystery", tokens=["a", "b", "ab"], merges=["a b"]), "mystery"),
        (lambda p: write_gguf(p, model="gpt2", tokens=["a", "b"]), "without tokenizer.ggml.merges"),
        (lambda p: write_gguf(p, model="llama", tokens=["a", "a"]), "duplicate token"),
        (lambda p: write_gguf(p, pre="default"), "no tokenizer.ggml.model"),
        (lambda p: write_gguf(p, model="llama", tokens=["a", "b"], token_type=[1]), "1 entries for 2 tokens"),
        (lambda p: None, "cannot read"),
    ],
    ids=[
        "truncated-body",
        "truncated-header",
        "text",
        "empty",
        "version",
        "rwkv",
        "unknown-pre",
        "no-merges",
        "duplicate",
        "no-vocab",
        "short-types",
        "missing",
    ],
)
def test_bad_files_raise_load_errors_naming_the_source(tmp_path: Path, make, reason: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "model.gguf"
    make(path)
    with pytest.raises(TokenizerLoadError) as info:
        load_gguf(path)
    assert info.value.source == str(path) and str(path) in str(info.value)
    assert reason in info.value.reason, info.value.reason


# ---- UGM and SPM files written from the SentencePiece fixtures ----------------------------------
def _protobuf_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, everything else as bytes."""

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = data[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if byte < 0x80:
                return value, i

    i = 0
    while i < len(data):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            value, i = varint(i)
            yield key >> 3, value
            continue
        size = {1: 8, 5: 4}.get(wire)
        if size is None:  # length-delimited
            size, i = varint(i)
        yield key >> 3, data[i : i + size]
        i += size


def _sentencepiece_vocab(model: Path) -> tuple[list[tuple[str, float, int]], dict[int, int | bytes]]:
    """The pieces (text, score, type) and the normalizer spec fields of a .model file."""
    proto = sentencepiece.SentencePieceProcessor(model_file=str(model)).serialized_model_proto()
    pieces, normalizer = [], {}
    for number, value in _protobuf_fields(proto):
        if number == 1:  # ModelProto.pieces
            piece = dict(_protobuf_fields(value))  # type: ignore[arg-type]
            score = struct.unpack("<f", piece[2])[0] if 2 in piece else 0.0  # type: ignore[arg-type]
            pieces.append((piece[1].decode("utf-8"), score, piece.get(3, 1)))  # type: ignore[union-attr]
        elif number == 3:  # ModelProto.normalizer_spec
            normalizer = dict(_protobuf_fields(value))  # type: ignore[arg-type]
    return pieces, normalizer  # type: ignore[return-value]


def write_ugm_gguf(model: Path, out: Path, vocab_model: str = "t5") -> tuple[sentencepiece.SentencePieceProcessor, Path]:
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    pieces, normalizer = _sentencepiece_vocab(model)
    writer = gguf.GGUFWriter(out, arch=vocab_model)
    writer.add_tokenizer_model(vocab_model)
    writer.add_token_list([p for p, _, _ in pieces])
    writer.add_token_scores([s for _, s, _ in pieces])
    writer.add_token_types([t for _, _, t in pieces])
    writer.add_unk_token_id(sp.unk_id())
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    if vocab_model == "t5":  # llama.cpp's SPM applies no normalizer
        writer.add_add_space_prefix(bool(normalizer.get(3, 1)))  # NormalizerSpec.add_dummy_prefix
        writer.add_remove_extra_whitespaces(bool(normalizer.get(4, 1)))
        writer.add_precompiled_charsmap(normalizer[2])  # type: ignore[arg-type]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return sp, out


def varied_texts() -> list[str]:
    return corpus_text().split("\n") + [t for t, _ in vocab_tests("llama-spm")] + JAPANESE


# sentencepiece agreement per model (of 4341 texts): the one kyoto_ja miss is an exact tie of two
# segmentations that float32 (sentencepiece) and f64 (tokenizers, llama.cpp's double) round apart
UGM_AGREEMENT = {"botchan_en_unigram_1000": 4341, "kyoto_ja_unigram_8000": 4340}


@pytest.mark.parametrize("model", sorted(UGM_AGREEMENT))
def test_ugm_gguf_encodes_like_sentencepiece(tmp_path: Path, model: str) -> None:
    sp, path = write_ugm_gguf(spm_fixture(model), tmp_path / f"{model}.gguf")
    tok = load_gguf(path)
    assert tok.vocab_type == "ugm" and tok.special_tokens.unk == "<unk>" and tok.special_tokens.eos == "</s>"
    texts = varied_texts()
    agree = sum(tok.encode(t) == sp.encode(t) for t in texts)
    assert len(texts) == 4341 and agree >= UGM_AGREEMENT[model]
    assert tok.encode("Hello", add_special_tokens=True)[-1] == sp.eos_id()  # T5 ends with </s>
    for text in texts[:300] + JAPANESE:
        ids = sp.encode(text)
        if sp.unk_id() not in ids:
            assert tok.decode(ids) == sp.decode(ids), text
    assert verify_byte_decoding(tok, tok.byte_decoding()) is None  # type: ignore[arg-type]


def test_spm_gguf_encodes_like_sentencepiece_bpe(tmp_path: Path) -> None:
    """A SentencePiece BPE model as a llama (SPM) vocabulary: llama.cpp's score-ordered merging is
    SentencePiece's BPE, compared on the lines its (absent) normalizer would leave unchanged."""
    sp, path = write_ugm_gguf(spm_fixture("botchan_en_bpe_1000"), tmp_path / "spm.gguf", vocab_model="llama")
    tok = load_gguf(path)
    lines = [t for t in corpus_text().split("\n") if t and sp.normalize(t) == "\u2581" + t.replace(" ", "\u2581")]
    assert len(lines) == 4177
    assert [tok.encode(t) for t in lines] == [sp.encode(t) for t in lines]
    for ids in (sp.encode(t) for t in lines[:500]):
        if sp.unk_id() not in ids:  # sentencepiece spells <unk> " ⁇ "; it is a special token here
            assert tok.decode(ids) == sp.decode(ids)


# ---- Gemma 4 (tokenizer.ggml.model = "gemma4") -------------------------------------------------
def test_gemma4_vocabulary_facts() -> None:
    """BPE over SentencePiece-style pieces: ▁ for spaces, merges over raw UTF-8, <0xXX> byte
    fallback, newline runs kept whole, BOS added, llama.cpp's end-of-generation tokens."""
    tok = loaded("gemma-4")
    assert tok.vocab_type == "bpe" and tok.vocab_size == 262144
    assert (tok.special_tokens.bos, tok.special_tokens.eos) == ("<bos>", "<eos>")
    assert tok.token_to_id(tok.special_tokens.eos) == 1  # the primary EOS (stop_reason null)
    assert tok.eos_token_ids == {1, 50, 106}  # <eos>, <|tool_response>, <turn|>
    assert tok.encode("Hello world", add_special_tokens=True) == [2, *tok.encode("Hello world")]
    assert tok.id_to_token(tok.encode(" Hello")[0]) == "\u2581Hello"
    for k in (1, 2, 7, 31):  # a run of newlines that is a token stays whole
        assert tok.encode("\n" * k) == [tok.token_to_id("\n" * k)]
    assert tok.encode("\n" * 33) == [tok.token_to_id("\n" * 31), tok.token_to_id("\n\n")]
    rare = "\U000f0001"  # not in the vocabulary: its four UTF-8 bytes as <0xXX> tokens
    assert [tok.id_to_token(i) for i in tok.encode(rare)] == ["<0xF3>", "<0xB0>", "<0x80>", "<0x81>"]
    assert tok.decode(tok.encode(f"a {rare} b")) == f"a {rare} b"
    assert tok.decode([105, 2364, 107], skip_special_tokens=False) == "<|turn>user\n"
    assert tok.decode([105, 2364, 107]) == "user\n"


def test_gemma4_tokenizer_json_form_streams_exactly() -> None:
    """Gemma 4's tokenizer.json form (BPE with byte fallback, Replace(" ", "▁") normalizer,
    Replace("▁", " ") + ByteFallback + Fuse decoder), built from the GGUF: the byte table is
    derived from that decoder, verified against tokenizers' own decode, and streams exactly."""
    import json

    from detok import DecodeParams
    from detok.stream import prepare_decoding
    from tests.helpers.stream_helpers import oracle, run_stream

    hf = loaded("gemma-4").hf_tokenizer
    # each part's own JSON (the whole tokenizer's holds the 262K vocabulary and its merges)
    normalizer, decoder = (json.loads(part.__getstate__()) for part in (hf.normalizer, hf.decoder))
    assert normalizer == {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    assert [d["type"] for d in decoder["decoders"]] == ["Replace", "ByteFallback", "Fuse"]
    assert type(hf.model).__name__ == "BPE" and hf.model.byte_fallback
    tok = stream_roster.get("hf-gemma-4")  # that tokenizer.json, loaded by the Hugging Face backend
    assert tok.backend == "huggingface"
    plan = prepare_decoding(tok)
    assert plan.strategy == "bytes", plan.reason
    for text, want in vocab_tests("gemma-4"):
        assert tok.encode(text) == want
    ids = tok.encode("Ünïcödé 北京 🫨\n\n  code:\tx = 1\n") + [106, 1, 105] + tok.encode(" tail")
    for params in (DecodeParams(), DecodeParams(skip_special_tokens=False),
                   DecodeParams(skip_special_tokens=False, spaces_between_special_tokens=False)):
        for groups in ([1], [2, 3], [len(ids)]):
            want, _, _ = oracle(tok, ids[:3], ids[3:], params)
            assert "".join(run_stream(tok, ids[:3], ids[3:], params, groups)[0]) == want


# ---- every vocabulary type and pre-tokenizer llama.cpp accepts: loads, or fails naming it -------
# read off llama.cpp's src/llama-vocab.cpp (llama_vocab::impl::load)
LLAMA_CPP_MODELS = ["no_vocab", "none", "llama", "bert", "gpt2", "hybriddna", "whitespace", "t5", "rwkv",
                    "plamo2", "gemma4"]
LLAMA_CPP_PRES = (
    "default minicpm5 llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano "
    "deepseek-llm deepseek-coder deepseek-v3 spark2_5 youtu falcon mpt starcoder gpt-2 phi-2 jina-es jina-de "
    "gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jais-2 gemma4 granite-embed-multi-311m "
    "sarvam-moe jina-v1-en jina-v2-code roberta-bpe whitespace refact command-r qwen2 deepseek-r1-qwen kormo "
    "f2llmv2 qwen35 stablelm2 olmo dbrx smaug-bpe poro-chat glm4 chatglm-bpe viking jais tekken smollm "
    "codeshell bloom gpt3-finnish exaone exaone4 exaone-moe chameleon minerva-7b megrez gpt-4o llama4 kanana2 "
    "talkie granite-embed-multi-97m tiny_aya cohere2moe superbpe trillion granite-docling bailingmoe "
    "bailingmoe2 llada-moe seed-coder hunyuan hunyuan-dense hy_v4 joyai-llm kimi-k2 ufakzeka grok-2 afmoe "
    "laguna minimax-m2 solar-open mellum2"
).split()
UNSUPPORTED_PRES = {"kimi-k2", "afmoe", "whitespace"}
TINY_BPE = dict(tokens=["a", "b", "ab", "\u2581", "\u2581ab", "<0x0A>", "<s>"], merges=["a b", "\u2581 ab"],
                token_type=[1, 1, 1, 1, 1, 6, 3])


def _tiny_gguf(path: Path, model: str, pre: str | None = None) -> Path:
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(TINY_BPE["tokens"])
    writer.add_token_types(TINY_BPE["token_type"])
    writer.add_token_merges(TINY_BPE["merges"])
    writer.add_bos_token_id(6)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def test_every_llama_cpp_pre_tokenizer_loads_or_names_itself(tmp_path: Path) -> None:
    from detok.tokenizer.gguf_pretokenizers import PRE_TOKENIZERS, UNSUPPORTED_PRE_TOKENIZERS

    assert set(UNSUPPORTED_PRE_TOKENIZERS) == UNSUPPORTED_PRES
    assert set(PRE_TOKENIZERS) | UNSUPPORTED_PRES == set(LLAMA_CPP_PRES)
    for pre in LLAMA_CPP_PRES:
        path = _tiny_gguf(tmp_path / f"{pre}.gguf", "gpt2", pre)
        if pre in UNSUPPORTED_PRES:
            with pytest.raises(TokenizerLoadError, match=f"tokenizer.ggml.pre='{pre}'"):
                load_gguf(path)
            continue
        tok = load_gguf(path)
        spm_style = PRE_TOKENIZERS[pre].spm_style
        text = "ab ab" if spm_style else "abab"  # (the tiny vocabulary has no byte-level space)
        assert tok.encode(text) == ([2, 4] if spm_style else [2, 2]), pre
        assert tok.decode(tok.encode(text)) == text, pre
        assert (tok.encode("ab", add_special_tokens=True)[0] == 6) == PRE_TOKENIZERS[pre].add_bos, pre


def test_every_llama_cpp_vocabulary_type_loads_or_names_itself(tmp_path: Path) -> None:
    from detok.tokenizer.gguf_vocab import UNSUPPORTED_VOCAB_TYPES, VOCAB_TYPES

    assert set(VOCAB_TYPES) | set(UNSUPPORTED_VOCAB_TYPES) == set(LLAMA_CPP_MODELS)
    for model in LLAMA_CPP_MODELS:
        path = _tiny_gguf(tmp_path / f"{model}.gguf", model)
        if model in UNSUPPORTED_VOCAB_TYPES:
            with pytest.raises(TokenizerLoadError, match=f"tokenizer.ggml.model='{model}'"):
                load_gguf(path)
        else:
            assert load_gguf(path).vocab_type == VOCAB_TYPES[model]
    gemma = load_gguf(_tiny_gguf(tmp_path / "g.gguf", "gemma4", pre="qwen2"))  # the file's pre is ignored
    assert gemma.encode("ab ab") == [2, 4] and gemma.encode("x", add_special_tokens=True)[:1] == [6]
