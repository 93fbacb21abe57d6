"""body_precheck: id arrays and message lists too long for the server are refused from their
raw bytes (counted, not built); anything else is left to pydantic."""

from __future__ import annotations

import json

import pytest

from detok.api.body_precheck import PRECHECK_MIN_BYTES, precheck
from detok.api.errors import RequestError
from detok.api.limits import MAX_MESSAGES


def _body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize("prompt", [list(range(800_000)), [list(range(800_000))]])
def test_too_many_prompt_ids_is_the_context_length_error_with_the_exact_count(prompt: object) -> None:
    with pytest.raises(RequestError) as e:
        precheck(_body(prompt=prompt, max_tokens=5), "completion", 32768)
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt"
    assert "your request has 800000 input tokens" in e.value.message


def test_ids_that_fit_and_other_prompts_are_left_to_pydantic() -> None:
    precheck(_body(prompt=list(range(32767)), pad="x" * PRECHECK_MIN_BYTES), "completion", 32768)
    precheck(_body(prompt=["a, b, c" * 200_000]), "completion", 32768)  # text: tokenized later
    precheck(_body(prompt=[[1, 2], [3, 4]] * 100_000), "completion", 32768)  # a batch: refused later
    precheck(b"{not json" + b" " * PRECHECK_MIN_BYTES, "completion", 32768)
    precheck(_body(prompt=[]), "completion", 32768)


def test_too_many_messages_is_refused_before_they_are_built() -> None:
    many = _body(messages=[{"role": "user", "content": "x"}] * 250_000)
    with pytest.raises(RequestError, match=f"at most {MAX_MESSAGES} messages") as e:
        precheck(many, "chat", 32768)
    assert e.value.param == "messages" and e.value.status == 400
    fits = _body(messages=[{"role": "user", "content": "x" * 200}] * MAX_MESSAGES)
    assert len(fits) > PRECHECK_MIN_BYTES
    precheck(fits, "chat", 32768)
    precheck(_body(messages=[{"role": "user", "content": "[" * PRECHECK_MIN_BYTES}]), "chat", 32768)


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("side", [None, "left", "right"])
def test_too_many_ids_with_truncation_are_cut_to_the_context_on_the_kept_side(nested: bool, side: object) -> None:
    # vLLM cuts a token prompt of any length: the array is cut (as text, never built whole) to the
    # max_model_len ids the truncation may keep, and the request's own truncation applies after
    ids = list(range(100_000))
    body = _body(prompt=[ids] if nested else ids, max_tokens=4, truncate_prompt_tokens=10,
                 **({"truncation_side": side} if side else {}))
    cut = json.loads(precheck(body, "completion", 4096))
    prompt = cut["prompt"][0] if nested else cut["prompt"]
    assert prompt == (ids[:4096] if side == "right" else ids[-4096:])
    assert {k: v for k, v in cut.items() if k != "prompt"} == {k: v for k, v in json.loads(body).items() if k != "prompt"}
    # the dropped text must be integers: else the request is refused as before (pydantic's types)
    bad = _body(prompt=[1.5] * 100_000 + [1] * 10, truncate_prompt_tokens=10)
    with pytest.raises(RequestError) as e:
        precheck(bad, "completion", 4096)
    assert e.value.code == "context_length_exceeded"
    exact = _body(prompt=list(range(4096)), truncate_prompt_tokens=10, pad="x" * PRECHECK_MIN_BYTES)
    assert precheck(exact, "completion", 4096) == exact  # (the context exactly: parsed as it is)
