"""Named cases from docs/tokenizers.md and the seeds, and the O(1)-per-token structure of both strategies."""

from __future__ import annotations

import pytest

import tests.helpers.stream_roster as stream_roster
from detok import DecodeParams, DecodeStream, Finish
from detok.stream import prepare_decoding


@pytest.mark.parametrize("name", ["qwen2", "python-user"])
def test_shaking_face_emoji_appears_at_the_token_that_completes_it(name: str) -> None:
    """Seed 003's 🫨 case: three tokens, nothing until the third, then the emoji, exactly once."""
    tok = stream_roster.get(name)
    ids = tok.encode("🫨")
    assert ids == [9284, 104, 101]
    stream = DecodeStream(tok, tok.encode("Look: "), DecodeParams())
    assert [stream.step([i]).text for i in ids] == ["", "", "🫨"]
    assert stream.finish("length").text == ""


@pytest.mark.parametrize("name", ["mistral-spm-v1", "gguf-llama-spm"])
def test_byte_fallback_cjk_never_retreats_or_repeats(name: str) -> None:
    """`▁北京` + the bytes of 欢 + the first byte of 迎: Hugging Face's ByteFallback decodes the prefix
    as 北京���� while incomplete; following decode() backwards duplicated text (SGLang #31598)."""
    tok = stream_roster.get(name)
    head = tok.encode("北京")
    byte = {b: tok.token_to_id(f"<0x{b:02X}>") for b in (0xE6, 0xAC, 0xA2, 0xE8, 0xBF, 0x8E)}
    stream = DecodeStream(tok, [], DecodeParams())
    got = [stream.step(head).text]
    got += [stream.step([byte[b]]).text for b in (0xE6, 0xAC, 0xA2)]
    got += [stream.step([byte[0xE8]]).text]
    assert got == ["北京", "", "", "欢", ""]
    assert stream.holding_utf8
    # the character completes: emitted once, at the completing token
    assert stream.step([byte[0xBF]]).text == "" and stream.step([byte[0x8E]]).text == "迎"
    # an incomplete tail at finish becomes one U+FFFD
    stream.step([byte[0xE8]])
    assert stream.finish("length").text == "\ufffd"


def test_context_ending_mid_character_gives_its_bytes_to_the_output() -> None:
    """vLLM #48853: the prompt ends inside a character; the first delta is that character, and no
    prompt text is ever re-emitted."""
    tok = stream_roster.get("qwen2")
    ids = tok.encode("🫨")
    stream = DecodeStream(tok, tok.encode("Hi ") + ids[:2], DecodeParams())
    assert stream.step([ids[2]]).text == "🫨"
    assert stream.step(tok.encode(" ok")).text == " ok"


def test_invalid_bytes_become_replacement_as_soon_as_known() -> None:
    tok = stream_roster.get("qwen2")
    ff = tok.token_to_id("ÿ")  # byte 0xFF: never valid UTF-8
    lead = tok.encode("🫨")[0]  # starts a 4-byte sequence
    stream = DecodeStream(tok, [], DecodeParams())
    assert stream.step([ff]).text == "\ufffd"
    assert stream.step([lead]).text == ""
    assert stream.step(tok.encode("A")).text == "\ufffdA"  # the sequence can no longer complete


@pytest.mark.parametrize("name", ["qwen2", "gguf-bert-bge"])
def test_out_of_vocabulary_id_finishes_with_error_naming_it(name: str) -> None:
    tok = stream_roster.get(name)
    ok = tok.encode("hello")
    bad = tok.vocab_size + 7
    stream = DecodeStream(tok, [], DecodeParams())
    d = stream.step([*ok, bad, *ok])
    assert d.finish is not None and d.finish.reason == "error" and str(bad) in (d.finish.message or "")
    assert d.text == tok.decode(ok)
    assert stream.finished and stream.step(ok).text == ""
    assert DecodeStream(tok, [], DecodeParams()).step([-1]).finish.reason == "error"


def test_bad_prompt_tail_is_an_error_at_the_first_step() -> None:
    tok = stream_roster.get("qwen2")
    stream = DecodeStream(tok, [tok.vocab_size], DecodeParams())
    d = stream.step(tok.encode("x"))
    assert d.finish == Finish("error", None, f"token id {tok.vocab_size} is outside the vocabulary (size {tok.vocab_size})")


def test_strategy_is_verified_not_assumed() -> None:
    assert prepare_decoding(stream_roster.get("qwen2")).strategy == "bytes"
    assert prepare_decoding(stream_roster.get("gguf-bert-bge")).strategy == "window"  # WordPiece
    assert prepare_decoding(stream_roster.get("python-user")).strategy == "window"
    with pytest.raises(ValueError):
        prepare_decoding(stream_roster.get("gguf-bert-bge"), "bytes")
    assert prepare_decoding(stream_roster.get("qwen2"), "window").strategy == "window"


# ---- O(1) per token: structure, not timing (timing lives in bench/) ----------------------------
class _CountingDecode:
    def __init__(self, tok) -> None:
        self.inner = tok._decode_ids
        self.calls = 0
        self.max_len = 0

    def __call__(self, ids, skip):
        self.calls += 1
        self.max_len = max(self.max_len, len(ids))
        return self.inner(ids, skip)


@pytest.mark.parametrize("length", [1_000, 20_000])
def test_window_strategy_cost_per_token_is_flat(length: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode calls per token and window length stay bounded whatever the output length, with
    runs of skipped special tokens costing no decode at all (SGLang #8031)."""
    tok = stream_roster.get("python-user")
    counter = _CountingDecode(tok)
    monkeypatch.setattr(tok, "_decode_ids", counter)
    words = tok.encode(" plain text 北京 🫨 more")
    special = sorted(tok.special_ids)[0]
    stream = DecodeStream(tok, list(range(1000)), DecodeParams(), ignore_eos=True)  # a long prompt
    assert counter.max_len <= 5  # priming reads the prompt tail only
    counter.calls = 0
    n = 0
    while n < length:
        stream.step(words)
        stream.step([special] * 50)  # decode to "" when skipped: free
        n += len(words) + 50
    assert counter.calls <= 4 * (length // (len(words) + 50) + 1) * len(words)
    assert counter.max_len <= 4 * len(words)


def test_byte_strategy_state_stays_bounded_on_adversarial_streams() -> None:
    tok = stream_roster.get("gguf-llama-spm")
    cont = tok.token_to_id("<0x80>")  # a continuation byte alone: invalid forever
    lead = tok.token_to_id("<0xF0>")
    stream = DecodeStream(tok, [], DecodeParams(stop=["never appears here"]))
    total = 0
    for k in range(50_000):
        d = stream.step([lead if k % 3 == 0 else cont])
        total += len(d.text)
        assert len(stream._text._pending) <= 3 and len(stream.held_text) < len("never appears here")
    assert total > 0


# ---- ByteFallback without the ▁ replacement: a byte map too, one replacement rule ---------------
@pytest.fixture(scope="module")
def bytefallback_only(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Llama-2's vocabulary with the decoder [ByteFallback, Fuse] (no Metaspace / Replace)."""
    import tokenizers
    from tokenizers import decoders

    import detok

    hf = tokenizers.Tokenizer.from_str(stream_roster.get("gguf-llama-spm").hf_tokenizer.to_str())  # type: ignore[attr-defined]
    hf.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    folder = tmp_path_factory.mktemp("bytefallback")
    (folder / "tokenizer.json").write_text(hf.to_str(), encoding="utf-8")
    return detok.load_tokenizer(str(folder))


def _both_strategies(tok, ids: list[int]) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    texts = []
    for strategy in ("bytes", "window"):
        stream = DecodeStream(tok, [], DecodeParams(), ignore_eos=True, strategy=strategy)  # type: ignore[arg-type]
        texts.append("".join(stream.step([i]).text for i in ids) + stream.finish().text)
    return texts[0], texts[1]


def test_bytefallback_decoder_streams_by_byte_table_with_the_utf8_rule(bytefallback_only) -> None:  # type: ignore[no-untyped-def]
    """The same bytes give the same text whatever the strategy wherever the tokenizer's own decode
    follows the rule too (valid text, an invalid run of one byte token, a one-byte incomplete
    tail); on a longer invalid run Hugging Face gives one U+FFFD per byte token (even to valid bytes
    in the run), the byte table one per maximal invalid subpart: the project's rule (docs/tokenizers.md, What
    the text is), which the window strategy can only inherit from the decode it diffs."""
    tok = bytefallback_only
    assert prepare_decoding(tok).strategy == "bytes"
    byte = {b: tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    word = tok.encode("北京 ok")
    assert tok.decode(word) == "\u2581北京\u2581ok"  # no ▁ replacement in this decoder
    agreeing = [
        word,
        [*word, byte[0xE6], byte[0xAC], byte[0xA2], *word],  # 欢 from bytes
        [*word, byte[0xFF], *word],  # one invalid byte
        [byte[0x80], *word, byte[0xF0]],  # invalid byte, then an incomplete tail of one byte
    ]
    for ids in agreeing:
        assert _both_strategies(tok, ids) == (tok.decode(ids), tok.decode(ids))
    run = [*word, byte[0xE6], byte[0xAC], *tok.encode("A"), byte[0xE8], byte[0xBF], byte[0x8E], byte[0xFF]]
    by_table, by_window = _both_strategies(tok, run)
    assert by_table == "\u2581北京\u2581ok\ufffd\u2581A迎\ufffd"
    # the window inherits the library's replacements (one per byte token; and its prefix decodes
    # are not prefixes of the whole: 迎 once complete, then U+FFFDs, is never retracted)
    assert by_window.startswith("\u2581北京\u2581ok\ufffd\ufffd\u2581A") and by_window != by_table
    assert tok.decode(run) == "\u2581北京\u2581ok\ufffd\ufffd\u2581A\ufffd\ufffd\ufffd\ufffd"


@pytest.mark.parametrize("step", [1, 3, 5, 8, 9])
def test_window_strategy_holds_a_character_begun_after_others_completed_in_one_step(step: int) -> None:
    """Byte ids of 4-byte characters back to back, several ids per step: a step that completes
    held characters and begins another keeps only the incomplete tail, however many ids were
    held before it (found by hypothesis: 5 ids per step once gave U+FFFD for the last character)."""
    tok = stream_roster.get("python-user")
    text = "00000\x81\x81\U00014000𗀀𞅎0𭀀"
    ids = tok.encode(text)
    stream = DecodeStream(tok, [], DecodeParams(), ignore_eos=True)
    got = "".join(stream.step(ids[k : k + step]).text for k in range(0, len(ids), step))
    assert got + stream.finish().text == tok.decode(ids) == text
