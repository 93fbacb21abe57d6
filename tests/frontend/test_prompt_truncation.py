"""`truncate_prompt_tokens` / `truncation_side` as vLLM serves them (`vllm/renderers/params.py`'s
TokenizeParams; the fields of its chat and completion protocols): a text prompt cut as the
`tokenizers` library's truncating encode cuts it (what `transformers` does for vLLM, with the
special tokens kept), ids cut to their last (or first) k, -1 the whole input room, a k past the
room a 400 with vLLM's message, bad values refused; and the cut prompt served end to end."""

from __future__ import annotations

import asyncio

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.api.prompt_truncation import encode_truncated
from detok.tokenizer.default import load_default_tokenizer
from tests.helpers import stream_roster
from tests.helpers.frontend_harness import MODEL, running_app
from tests.helpers.request_jobs import job as _job
from tests.helpers.request_jobs import refused as _refused

LONG = " word" * 100 + " end"


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


# ---- the cut, against the tokenizers library's own truncation -----------------------------------------


_REFERENCES: dict[str, tokenizers.Tokenizer] = {}


def _with_reference(name: str):  # type: ignore[no-untyped-def]
    """The tokenizer and its own copy in the tokenizers library (truncation is that object's state)."""
    tok = stream_roster.get(name)
    if name not in _REFERENCES:
        _REFERENCES[name] = tokenizers.Tokenizer.from_str(tok.hf_tokenizer.to_str())
    return tok, _REFERENCES[name]


@pytest.mark.parametrize("name", ["hf-gemma-4", "qwen2"])  # BOS added by the post-processor / nothing added
@settings(max_examples=40, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60) | st.just(LONG),
       keep=st.integers(1, 30), side=st.sampled_from(["left", "right"]))
def test_a_text_prompt_is_cut_as_the_tokenizers_librarys_truncating_encode(name, text, keep, side):
    tok, reference = _with_reference(name)
    reference.enable_truncation(keep, direction=side)
    for special in (True, False):
        assert encode_truncated(tok, text, special, keep, side) == reference.encode(text, add_special_tokens=special).ids


def test_special_tokens_on_both_sides_stay_and_count_towards_k():
    tok = stream_roster.get("gguf-bert-bge")  # [CLS] text [SEP]
    whole, content = tok.encode_prompt(LONG, add_special_tokens=True), tok.encode_prompt(LONG, add_special_tokens=False)
    assert len(whole) == len(content) + 2
    assert encode_truncated(tok, LONG, True, 6, "left") == [whole[0], *content[-4:], whole[-1]]
    assert encode_truncated(tok, LONG, True, 6, "right") == [whole[0], *content[:4], whole[-1]]
    # k below the special tokens' count: the library leaves the text whole, the ids are cut (vLLM)
    assert encode_truncated(tok, LONG, True, 1, "left") == [whole[-1]]
    assert encode_truncated(tok, LONG, True, 1, "right") == [whole[0]]


# ---- requests --------------------------------------------------------------------------------------


def test_completions_keep_the_last_k_ids_and_right_keeps_the_first(tok):
    ids = tok.encode(LONG)
    assert _job(tok, "completion", prompt=LONG, truncate_prompt_tokens=10, max_tokens=5).prompt_ids == ids[-10:]
    right = _job(tok, "completion", prompt=LONG, truncate_prompt_tokens=10, max_tokens=5, truncation_side="right")
    assert right.prompt_ids == ids[:10]
    # ids sent as the prompt are cut too, and echo shows what was served
    job = _job(tok, "completion", prompt=ids, truncate_prompt_tokens=3, max_tokens=5, echo=True)
    assert job.prompt_ids == ids[-3:] and job.echo == tok.decode(ids[-3:], skip_special_tokens=False)
    # a prompt already short enough is left whole
    assert _job(tok, "completion", prompt="hi", truncate_prompt_tokens=10).prompt_ids == tok.encode("hi")


def test_minus_one_is_the_input_room_left_by_max_tokens(tok):
    ids = tok.encode(LONG)
    # completions: OpenAI's 16 tokens when max_tokens is not sent (vLLM's default too)
    assert _job(tok, "completion", prompt=LONG, truncate_prompt_tokens=-1).prompt_ids == ids[-(64 - 16):]
    assert _job(tok, "completion", prompt=LONG, truncate_prompt_tokens=-1, max_tokens=4).prompt_ids == ids[-60:]
    # chat: the rendered conversation is cut; without max_tokens the room is the whole context
    # (then no room is left for output: the context-length 400)
    messages = [{"role": "user", "content": LONG}]
    job = _job(tok, "chat", messages=messages, truncate_prompt_tokens=-1, max_completion_tokens=8)
    rendered = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True))
    assert job.prompt_ids == rendered[-56:] and job.max_tokens == 8
    assert _refused(tok, "chat", messages=messages, truncate_prompt_tokens=-1).code == "context_length_exceeded"


def test_a_k_past_the_room_is_vllms_400(tok):
    error = _refused(tok, "completion", prompt=LONG, truncate_prompt_tokens=49)
    assert error.status == 400 and error.param == "truncate_prompt_tokens"
    assert str(error) == ("truncate_prompt_tokens=49 cannot be greater than max_model_len - max_tokens = 48. "
                          "Please request a smaller truncation size.")
    error = _refused(tok, "chat", messages=[{"role": "user", "content": "x"}], truncate_prompt_tokens=60,
                     max_completion_tokens=10)
    assert "max_model_len - max_completion_tokens = 54" in str(error)
    # k = the room exactly is served
    assert len(_job(tok, "completion", prompt=LONG, truncate_prompt_tokens=48).prompt_ids) == 48


@pytest.mark.parametrize("value", [-2, 1.5, "8", True, 2**70])
def test_bad_values_are_refused(tok, value):
    error = _refused(tok, "completion", prompt="hi", truncate_prompt_tokens=value)
    assert error.status == 400 and error.param.startswith("truncate_prompt_tokens")


def test_zero_leaves_an_empty_prompt_and_a_bad_side_is_refused(tok):
    assert _refused(tok, "completion", prompt=LONG, truncate_prompt_tokens=0).param == "prompt"
    assert _refused(tok, "completion", prompt="hi", truncate_prompt_tokens=1, truncation_side="middle").param \
        == "truncation_side"


# ---- served --------------------------------------------------------------------------------------


def test_a_truncated_prompt_is_served_and_counted(tmp_path, tok):
    async def main() -> None:
        async with running_app(tmp_path, tok, max_model_len=64) as run:
            body = {"model": MODEL, "prompt": LONG, "max_tokens": 4, "truncate_prompt_tokens": 12, "seed": 1}
            whole = (await run.http.post("/v1/completions", json=body)).json()
            assert whole["usage"]["prompt_tokens"] == 12
            assert whole["choices"][0]["text"]
            # without it the same prompt does not fit
            too_long = await run.http.post("/v1/completions", json={**body, "truncate_prompt_tokens": None})
            assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
            # ids past the body precheck's size: cut, not refused (vLLM cuts token prompts of any length)
            ids = tok.encode(LONG) * 1000
            cut = await run.http.post("/v1/completions", json={**body, "prompt": ids, "echo": True})
            assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == 12
            assert cut.json()["choices"][0]["text"].startswith(tok.decode(ids[-12:], skip_special_tokens=False))

    asyncio.run(main())
