"""vLLM's detokenizer test facts (tests/tokenizers_/test_detokenize.py, tests/detokenizer/*) on the
real tokenizers we have: detok gives vLLM's text and finish, except where docs/tokenizers.md lists a deliberate
difference (each such case says why in tests/helpers/parity_cases.py)."""

from __future__ import annotations

import pytest

import tests.helpers.parity_cases as pc
from detok import DecodeParams, Finish
from tests.helpers.parity_runner import check_case, stream_deltas, tokenizer

# of the 230 decode-streaming cases, those whose prompt half ends inside a character (Burmese on
# DeepSeek in all three modes, on Tekken): detok emits the completed character (pc.PROMPT_MID_CHARACTER)
EXPECTED_MID_CHARACTER_PROMPTS = 4


@pytest.mark.parametrize("case", pc.VLLM_DETOKENIZE_CASES + pc.VLLM_DETOKENIZER_CASES, ids=lambda c: c.name)
def test_vllm_case(case: pc.Case) -> None:
    check_case(case)


def _streaming_cases() -> list[tuple[str, int, bool, tuple[bool, bool]]]:
    return [
        (name, k, with_prompt, mode)
        for name in pc.VLLM_TOKENIZERS
        for k in range(len(pc.VLLM_TRUTH))
        for with_prompt in (True, False)
        for mode in pc.VLLM_MODES
        if mode[0] or name not in pc.VLLM_SKIP_ONLY
    ]


@pytest.mark.parametrize(("name", "truth", "with_prompt", "mode"), _streaming_cases())
def test_vllm_decode_streaming(name: str, truth: int, with_prompt: bool, mode: tuple[bool, bool]) -> None:
    """test_decode_streaming: bos + truth + eos, the first half of the truth as the prompt; the
    streamed text is decode(all)[len(decode(prompt)):] (the backend's own decode, as vLLM's fast
    path: nothing inserted around special tokens whatever spaces_between_special_tokens)."""
    tok = tokenizer(name)
    skip, spaces = mode
    text = pc.VLLM_TRUTH[truth]
    ids = tok.encode(text)
    bos = tok.token_to_id(tok.special_tokens.bos) if tok.special_tokens.bos else None
    eos = tok.token_to_id(tok.special_tokens.eos) if tok.special_tokens.eos else None
    all_ids = ([bos] if bos is not None else []) + ids + ([eos] if eos is not None else [])
    full = tok.decode(all_ids, skip_special_tokens=skip)
    start = 0
    if with_prompt:
        start = len(tok.encode(text[: len(text) // 2])) + (bos is not None)
    prompt_text = tok.decode(all_ids[:start], skip_special_tokens=skip)
    vllm_expected = full[len(prompt_text) :]
    params = DecodeParams(skip_special_tokens=skip, spaces_between_special_tokens=spaces)
    deltas, finish = stream_deltas(tok, all_ids[:start], all_ids[start:], params, (1,))
    got = "".join(deltas)
    assert finish == Finish("length")
    if prompt_text.endswith("\ufffd"):  # a deliberate difference: pc.PROMPT_MID_CHARACTER
        assert got == full[len(prompt_text.rstrip("\ufffd")) :] != vllm_expected
    else:
        assert got == vllm_expected


@pytest.mark.parametrize("name", pc.VLLM_TOKENIZERS)
def test_vllm_oov_decode(name: str) -> None:
    """test_oov_decode: the id len(tokenizer) gives no text; detok then finishes the request with an
    error naming the id (pc.OOV_IS_AN_ERROR) instead of carrying on."""
    tok = tokenizer(name)
    deltas, finish = stream_deltas(tok, [], [tok.vocab_size], DecodeParams(), (1,))
    assert "".join(deltas) == ""
    assert finish is not None and finish.reason == "error" and str(tok.vocab_size) in (finish.message or "")


def test_primary_eos_is_the_stop_reason_null_id() -> None:
    """vLLM reports stop_reason null for the EOS that ends a request: the frontend recognises it as
    tok.token_to_id(tok.special_tokens.eos), which every backend resolves."""
    for name in [*pc.VLLM_TOKENIZERS, "python-user", "mock", "gguf-bert-bge"]:
        tok = tokenizer(name)
        eos = tok.special_tokens.eos
        if eos is None:
            assert name == "gguf-bert-bge"  # WordPiece: no end of sequence
            continue
        assert tok.token_to_id(eos) in tok.eos_token_ids, name


def test_count_of_deliberate_differences_in_decode_streaming() -> None:
    """The prompt-mid-character difference shows up only where vLLM's own test cuts a prompt inside
    a character (byte-fallback and byte-level pieces of Burmese and Chinese): listed, not hidden."""
    cut = []
    for name, truth, with_prompt, mode in _streaming_cases():
        if not with_prompt:
            continue
        tok = tokenizer(name)
        text = pc.VLLM_TRUTH[truth]
        bos = tok.token_to_id(tok.special_tokens.bos) if tok.special_tokens.bos else None
        ids = ([bos] if bos is not None else []) + tok.encode(text)
        start = len(tok.encode(text[: len(text) // 2])) + (bos is not None)
        if tok.decode(ids[:start], skip_special_tokens=mode[0]).endswith("\ufffd"):
            cut.append((name, truth, mode))
    assert len(cut) == EXPECTED_MID_CHARACTER_PROMPTS, cut


def _vllm_fast_text(hf, prompt: list[int], output: list[int], skip: bool, spaces: bool) -> str:  # type: ignore[no-untyped-def]
    """vLLM v1's FastIncrementalDetokenizer, from its facts: tokenizers' DecodeStream primed with the
    prompt; with special tokens kept and spaces_between_special_tokens=False, an added token right
    after an added token is its raw content (the prompt never counts as the token before)."""
    from tokenizers.decoders import DecodeStream as HFDecodeStream

    stream = HFDecodeStream(skip_special_tokens=skip)
    for tid in prompt:
        stream.step(hf, tid)
    raw = not (skip or spaces)
    added = {i: t.content for i, t in hf.get_added_tokens_decoder().items()} if raw else {}
    last_added = False
    out = []
    for tid in output:
        text = stream.step(hf, tid)
        if raw:
            content = added.get(tid)
            if content is not None and last_added:
                text = content
            last_added = content is not None
        out.append(text or "")
    return "".join(out)


@pytest.mark.parametrize("name", ["qwen2", "llama3", "gpt2", "deepseek", "hf-gemma-4"])
def test_same_text_as_vllm_fast_detokenizer(name: str) -> None:
    """Against the peer itself (tokenizers' own DecodeStream plus vLLM's rule), on text with runs of
    added tokens in every mode, cut on whole characters (where DecodeStream's text is final)."""
    import random

    from detok.stream import prepare_decoding

    tok = tokenizer(name)
    hf = tok.hf_tokenizer  # type: ignore[attr-defined]
    added = sorted(tok.added_tokens())
    rng = random.Random(name)
    words = ["Hello", " world", "，北京", " 🫨", "\n\n", " code(x)", " ok"]
    checked = 0
    for _ in range(30):
        ids: list[int] = []
        boundaries = [0]
        for _ in range(rng.randint(2, 6)):
            if rng.random() < 0.5:
                ids += [rng.choice(added) for _ in range(rng.randint(1, 3))]
            else:
                ids += tok.encode(rng.choice(words))
            boundaries.append(len(ids))
        cut = rng.choice(boundaries[:3])  # the prompt ends on a whole character
        prompt, output = ids[:cut], ids[cut:]
        for skip, spaces in ((True, True), (False, True), (False, False)):
            params = DecodeParams(skip_special_tokens=skip, spaces_between_special_tokens=spaces)
            deltas, _ = stream_deltas(tok, prompt, output, params, (1,))
            assert "".join(deltas) == _vllm_fast_text(hf, prompt, output, skip, spaces), (ids, cut, skip, spaces)
            checked += 1
    assert checked == 90 and prepare_decoding(tok).strategy == "bytes"
