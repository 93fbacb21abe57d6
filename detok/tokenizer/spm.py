"""SentencePiece `.model` backend: the `sentencepiece` library encodes; decoding is its per-token
byte map, the same rule Hugging Face's converted Llama / T5 tokenizers follow.

Each piece decodes to its text with ▁ as a space, a byte piece `<0xNN>` to that byte, a control
(`<s>`, `</s>`, `[INST]`) or unknown piece to its own text unless special tokens are skipped; the
bytes are joined, decoded as UTF-8 with each maximal invalid subpart replaced by one U+FFFD, and one
leading space is removed when the library removes it (dummy-prefix models; asked of the library at
load). This equals `SentencePieceProcessor.decode` on ordinary text. It differs where the library is
not a byte map: the library drops control pieces always, renders unknown as " ⁇ ", replaces every
invalid byte with its own U+FFFD, and keeps stripping a leading ▁ from each piece while its output is
still empty (so `▁` + `▁word` at the very start loses both spaces). Keeping to the byte map makes
`decode`, the byte table and the streamed text agree exactly.

Special-token text in the input (`</s>`, `[INST]`) is encoded as that control id, like Hugging Face
added tokens; the text around it is encoded piecewise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import sentencepiece

from detok.tokenizer.base import ByteDecoding, SpecialTokens, StoredVocabularyTokenizer, Tokenizer, TokenizerLoadError

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPACE = "\u2581"
_OPTIONS = frozenset({"add_bos", "add_eos"})


# ---- detection ----------------------------------------------------------------------------------
def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    value = 0
    for shift in range(0, 64, 7):
        if pos >= len(data):
            return None
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    return None


def _is_piece_message(msg: bytes) -> bool:
    """A SentencePiece submessage: piece string (1), score float (2), type enum (3), piece first."""
    pos = 0
    first = True
    while pos < len(msg):
        tag = _varint(msg, pos)
        if tag is None:
            return False
        key, pos = tag
        field, wire = key >> 3, key & 7
        if first and key != 0x0A:
            return False
        first = False
        if (field, wire) == (1, 2):
            length = _varint(msg, pos)
            if length is None or length[0] > len(msg) - length[1]:
                return False
            try:
                msg[length[1] : length[1] + length[0]].decode("utf-8")
            except UnicodeDecodeError:
                return False
            pos = length[1] + length[0]
        elif (field, wire) == (2, 5):
            pos += 4
        elif (field, wire) == (3, 0):
            value = _varint(msg, pos)
            if value is None:
                return False
            pos = value[1]
        else:
            return False
    return pos == len(msg) and not first


_USER_DEFINED = 4  # SentencePiece's ModelProto.SentencePiece.Type


def _fields(msg: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a protobuf message; stops at a malformed field."""
    pos = 0
    while pos < len(msg):
        key = _varint(msg, pos)
        if key is None:
            return
        field, wire, pos = key[0] >> 3, key[0] & 7, key[1]
        if wire == 0:
            value = _varint(msg, pos)
            if value is None:
                return
            yield field, wire, value[0]
            pos = value[1]
        elif wire == 2:
            size = _varint(msg, pos)
            if size is None or size[1] + size[0] > len(msg):
                return
            yield field, wire, msg[size[1] : size[1] + size[0]]
            pos = size[1] + size[0]
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield field, wire, msg[pos : pos + width]
            pos += width
        else:
            return


def _piece_types(proto: bytes) -> Iterator[int]:
    """The type of every piece of a serialized ModelProto, in id order (NORMAL = 1 when unset)."""
    for field, wire, value in _fields(proto):
        if field == 1 and wire == 2:
            assert isinstance(value, bytes)
            yield next((v for f, w, v in _fields(value) if f == 3 and w == 0), 1)  # type: ignore[misc]


def looks_like_sentencepiece(head: bytes) -> bool:
    """The first bytes of a file are a serialized ModelProto: repeated `pieces` (field 1) first.

    At least one whole piece must parse; a piece the head cuts short is not held against it.
    """
    pos = 0
    pieces = 0
    while pos < len(head) and pieces < 8:
        if head[pos] != 0x0A:
            return False
        length = _varint(head, pos + 1)
        if length is None:
            break
        size, start = length
        if size == 0 or size > 4096:
            return False
        if start + size > len(head):
            break
        if not _is_piece_message(head[start : start + size]):
            return False
        pos = start + size
        pieces += 1
    return pieces > 0


# ---- shared by the byte-map backends (sentencepiece, mistral-common, mock) -------------------
def decode_byte_pieces(
    pieces: Sequence[bytes],
    ids: Iterable[int],
    special_ids: frozenset[int],
    skip_special_tokens: bool,
    strip_leading_space: bool = False,
) -> str:
    """What a `ByteDecoding` claims `decode` is; ids outside the table decode to nothing."""
    n = len(pieces)
    if skip_special_tokens:
        data = b"".join(pieces[i] for i in ids if 0 <= i < n and i not in special_ids)
    else:
        data = b"".join(pieces[i] for i in ids if 0 <= i < n)
    text = data.decode("utf-8", errors="replace")
    if strip_leading_space and text.startswith(" "):
        return text[1:]
    return text


class SpecialTextEncoder:
    """Encodes text holding special-token strings: each one becomes its id, the rest goes to the
    backend's plain encoder segment by segment (as Hugging Face does with added tokens)."""

    def __init__(self, specials: Mapping[str, int], encode_plain: Callable[[str], list[int]]) -> None:
        self._specials = {s: i for s, i in specials.items() if s}
        self._encode_plain = encode_plain
        names = sorted(self._specials, key=len, reverse=True)  # longest first: `</s>` before `<`
        self._pattern = re.compile("|".join(map(re.escape, names))) if names else None

    def encode(self, text: str) -> list[int]:
        if self._pattern is None:
            return self._encode_plain(text)
        ids: list[int] = []
        pos = 0
        for m in self._pattern.finditer(text):
            if m.start() > pos:
                ids.extend(self._encode_plain(text[pos : m.start()]))
            ids.append(self._specials[m.group()])
            pos = m.end()
        if pos < len(text):
            ids.extend(self._encode_plain(text[pos:]))
        return ids

    def has_special(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None


# ---- the tokenizer ----------------------------------------------------------------------------
def _piece_bytes(piece: str, is_byte: bool) -> bytes:
    if is_byte:
        m = _BYTE_PIECE.match(piece)
        if m:
            return bytes((int(m.group(1), 16),))
    return piece.replace(_SPACE, " ").encode("utf-8")


class SentencePieceTokenizer(StoredVocabularyTokenizer):
    backend = "sentencepiece"

    def __init__(
        self, processor: sentencepiece.SentencePieceProcessor, source: str, add_bos: bool = True, add_eos: bool = False
    ) -> None:
        super().__init__(source)
        self._sp = processor
        n = processor.get_piece_size()
        self._vocab_size = n
        special = [i for i in range(n) if processor.is_control(i) or processor.is_unknown(i)]
        self._special_ids = frozenset(special)
        self._pieces = tuple(_piece_bytes(processor.id_to_piece(i), processor.is_byte(i)) for i in range(n))  # (see ByteDecoding)
        self._strip = self._strips_dummy_prefix()

        def named(tid: int) -> str | None:
            return processor.id_to_piece(tid) if 0 <= tid < n else None

        ids = {
            "bos": processor.bos_id(),
            "eos": processor.eos_id(),
            "unk": processor.unk_id(),
            "pad": processor.pad_id(),
        }
        self._bos_id = ids["bos"] if add_bos and 0 <= ids["bos"] < n else None
        self._eos_id = ids["eos"] if add_eos and 0 <= ids["eos"] < n else None
        self._eos_ids = frozenset((ids["eos"],)) if 0 <= ids["eos"] < n else frozenset()
        known = {i for i in ids.values() if i >= 0}
        self._special = SpecialTokens(
            **{k: named(v) for k, v in ids.items()},
            additional=tuple(processor.id_to_piece(i) for i in special if i not in known),
        )
        controls = {processor.id_to_piece(i): i for i in special if processor.is_control(i)}
        self._text_encoder = SpecialTextEncoder(controls, processor.encode)

    def _strips_dummy_prefix(self) -> bool:
        """Whether the library drops the ▁ the text starts with (add_dummy_prefix or
        remove_extra_whitespaces models, whitespace-suffix ones included), asked of the library."""
        sp = self._sp
        for i in range(self._vocab_size):
            piece = sp.id_to_piece(i)
            if piece.startswith(_SPACE) and not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i)):
                return sp.decode([i]) == piece.replace(_SPACE, " ")[1:]
        return False

    # ---- protocol ---------------------------------------------------------------------------
    @property
    def processor(self) -> sentencepiece.SentencePieceProcessor:
        return self._sp

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = self._text_encoder.encode(text)
        if add_special_tokens:
            ids = self._with_bos_eos(ids)
        return ids

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = False) -> list[list[int]]:
        texts = list(texts)
        if any(self._text_encoder.has_special(t) for t in texts):
            return [self.encode(t, add_special_tokens) for t in texts]
        batch = self._sp.encode(texts)
        return [self._with_bos_eos(ids) for ids in batch] if add_special_tokens else batch

    def _with_bos_eos(self, ids: list[int]) -> list[int]:
        head = [self._bos_id] if self._bos_id is not None else []
        tail = [self._eos_id] if self._eos_id is not None else []
        return [*head, *ids, *tail]

    def _decode_ids(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return decode_byte_pieces(self._pieces, ids, self._special_ids, skip_special_tokens, self._strip)

    def decode_segments(self, ids: Sequence[int]) -> str:
        """Special pieces as text, each run between them decoded on its own (dummy prefix removed
        per run): the text that `encode` turns back into these ids, as used for chat prompts."""
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self._special_ids:
                out.append(self._decode_ids(run, True))
                out.append(self._sp.id_to_piece(i))
                run = []
            else:
                run.append(i)
        out.append(self._decode_ids(run, True))
        return "".join(out)

    def _added_tokens(self) -> Mapping[int, str]:
        """Control, unknown and user-defined pieces: the added tokens of Hugging Face's conversion."""
        sp = self._sp
        user = {i for i, kind in enumerate(_piece_types(sp.serialized_model_proto())) if kind == _USER_DEFINED}
        return {i: sp.id_to_piece(i) for i in sorted(self._special_ids | user) if i < self._vocab_size}

    def token_to_id(self, token: str) -> int | None:
        tid = self._sp.piece_to_id(token)
        if tid == self._sp.unk_id() and token != self._sp.id_to_piece(tid):
            return None
        return tid

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= token_id < self._vocab_size:
            return None
        return self._sp.id_to_piece(token_id)

    def byte_decoding(self) -> ByteDecoding:
        return ByteDecoding(pieces=self._pieces, special_ids=self._special_ids, strip_leading_space=self._strip)


def open_processor(path: Path, source: str) -> sentencepiece.SentencePieceProcessor:
    if not path.is_file():
        raise TokenizerLoadError(source, f"no such file: {path}")
    try:
        with open(path, "rb") as f:
            proto = f.read()
    except OSError as e:
        raise TokenizerLoadError(source, f"cannot read {path}: {e.strerror}") from None
    if not looks_like_sentencepiece(proto[:4096]):
        raise TokenizerLoadError(source, f"{path.name} is not a SentencePiece model (no ModelProto pieces)")
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as e:  # the C++ library reports parse failures as RuntimeError
        raise TokenizerLoadError(source, f"sentencepiece cannot load {path.name}: {e}") from None


def load_sentencepiece(path: str | Path, **options: Any) -> Tokenizer:
    """A SentencePiece `.model`. Options: `add_bos` (default True) and `add_eos` (default False),
    what `add_special_tokens=True` adds."""
    source = str(path)
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TokenizerLoadError(
            source, f"unknown sentencepiece option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}"
        )
    processor = open_processor(Path(path).expanduser(), source)
    return SentencePieceTokenizer(
        processor, source, add_bos=bool(options.get("add_bos", True)), add_eos=bool(options.get("add_eos", False))
    )
