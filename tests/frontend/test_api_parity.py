"""OpenAI fields where detok must answer as vLLM does for the same request (its
`vllm/entrypoints/openai/{chat_completion,completion}/protocol.py` and `serving.py`,
`vllm/sampling_params.py`, `vllm/renderers/params.py`): the bounds of completions' `logprobs`, a
completion's default `max_tokens` against the context, the reply's role without a generation
prompt, logprobs hidden with `include_reasoning: false`, `logit_bias` clamped, greedy `n`, and
`seed: -1`."""

from __future__ import annotations

import asyncio
import json

import pytest

from detok.streaming import sse
from detok.api.errors import RequestError
from detok.api.openai_requests import CompletionRequest
from detok.streaming.stream_interval import effective_interval
from detok.api.validation import ServingLimits, completion_job
from detok.tokenizer.default import load_default_tokenizer
from tests.helpers.frontend_harness import MODEL, running_app
from tests.helpers.request_jobs import LIMITS
from tests.helpers.request_jobs import job as _job
from tests.helpers.request_jobs import refused as _refused

USER = [{"role": "user", "content": "Once upon"}]


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


# ---- request bounds ---------------------------------------------------------------------------------


def test_completion_logprobs_up_to_vllms_max_logprobs(tok):
    # vLLM: max_logprobs (20) for both APIs ("vLLM has higher default max_logprobs (20 instead of 5)
    # to support both Completion API and Chat Completion API", tests/entrypoints/openai/test_completion.py)
    assert _job(tok, "completion", prompt="hi", logprobs=20).logprobs == 20
    error = _refused(tok, "completion", prompt="hi", logprobs=21)
    assert error.status == 400 and error.param == "logprobs"


def test_completion_default_max_tokens_is_not_shrunk_to_fit(tok):
    # vLLM (and OpenAI): a completion without max_tokens asks for 16; a prompt that leaves less room
    # is a 400, not a shorter completion (TokenizeParams.max_input_tokens = max_model_len - 16)
    prompt = " word" * 55
    assert len(tok.encode(prompt)) + 16 > LIMITS.max_model_len
    error = _refused(tok, "completion", prompt=prompt)
    assert error.status == 400 and error.code == "context_length_exceeded"
    assert _job(tok, "completion", prompt=prompt, max_tokens=5).max_tokens == 5
    assert _job(tok, "completion", prompt="hi").max_tokens == 16


def test_context_error_names_max_completion_tokens_when_that_was_sent(tok):
    error = _refused(tok, "chat", messages=USER, max_completion_tokens=100)
    assert error.code == "context_length_exceeded" and error.param == "max_completion_tokens"
    assert _refused(tok, "chat", messages=USER, max_tokens=100).param == "max_tokens"


def test_logit_bias_is_clamped_as_vllm(tok):
    # vLLM's SamplingParams.from_optional clamps each bias to [-100, 100]; the key must be a vocabulary id
    _job(tok, "completion", prompt="hi", logit_bias={"5": 150.0, "6": -1000.0})
    assert _refused(tok, "completion", prompt="hi", logit_bias={"x": 1.0}).param == "logit_bias"
    with pytest.raises(RequestError) as info:  # (a JSON NaN literal, which pydantic takes as a float)
        completion_job(CompletionRequest.model_validate_json('{"prompt": "hi", "logit_bias": {"5": NaN}}'), tok, LIMITS)
    assert info.value.param == "logit_bias"


def test_greedy_sampling_takes_one_choice(tok):
    # vLLM: SamplingParams._verify_greedy_sampling, "n must be 1 when using greedy sampling"
    error = _refused(tok, "completion", prompt="hi", n=2, temperature=0)
    assert error.status == 400 and error.param == "n"
    assert _job(tok, "completion", prompt="hi", n=2, temperature=0.5).n == 2
    assert _job(tok, "chat", messages=USER, n=1, temperature=0).n == 1


def test_seed_minus_one_means_no_seed(tok):
    # vLLM #4531: seed -1 is a random seed (as OpenAI and llama.cpp take it), i.e. not given
    assert _job(tok, "completion", prompt="hi", seed=-1).seed == _job(tok, "completion", prompt="hi").seed == 0
    random = ServingLimits("m", 64, random_seed=True)
    assert len({_job(tok, "completion", random, prompt="hi", seed=-1).seed for _ in range(4)}) > 1


def test_include_reasoning_false_hides_logprobs(tok):
    # vLLM: with a parser, include_reasoning=false suppresses the logprobs of every chunk and of the
    # body ("to prevent leaking reasoning tokens through decoded token text in logprob entries")
    parsed = ServingLimits("m", 64, reasoning_parser="qwen3")
    assert _job(tok, "chat", parsed, messages=USER, logprobs=True, top_logprobs=2, include_reasoning=False).logprobs \
        is None
    assert _job(tok, "chat", parsed, messages=USER, logprobs=True, top_logprobs=2).logprobs == 2
    assert _job(tok, "chat", messages=USER, logprobs=True, include_reasoning=False).logprobs == 0  # nothing parsed


# ---- the reply's role --------------------------------------------------------------------------------


def _events(raw: str) -> list[dict]:
    return [json.loads(p) for p in sse.parse_events(iter(raw.splitlines(keepends=True))) if p != "[DONE]"]


def test_reply_role_without_generation_prompt_is_the_last_messages(tmp_path, tok):
    # vLLM's get_chat_request_role: the response role is the last message's when add_generation_prompt
    # is false, and echo prepends the last message when its role is the reply's
    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            body = {"model": MODEL, "messages": USER, "add_generation_prompt": False, "echo": True, "seed": 4}
            whole = (await run.http.post("/v1/chat/completions", json=body)).json()
            assert whole["choices"][0]["message"] == {"content": "Once uponseed 4 says hello", "role": "user"}
            chunks = _events((await run.http.post("/v1/chat/completions", json={**body, "stream": True})).text)
            assert chunks[0]["choices"][0]["delta"] == {"role": "user", "content": ""}
            streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            assert streamed == whole["choices"][0]["message"]["content"]
            # with the generation prompt: the assistant's reply, a user message is not echoed
            plain = (await run.http.post("/v1/chat/completions", json={**body, "add_generation_prompt": True})).json()
            assert plain["choices"][0]["message"] == {"content": "seed 4 says hello", "role": "assistant"}

    asyncio.run(main())


def test_custom_roles_reach_the_template(tok):
    # vLLM's CustomChatCompletionMessageParam ("Enables custom roles in the Chat Completion API"):
    # any role string, e.g. Llama 3.1's `ipython` tool results or GLM's `observation`
    messages = [{"role": "user", "content": "weather?"}, {"role": "ipython", "content": '{"t": 21}'}]
    job = _job(tok, "chat", messages=messages)
    assert job.prompt_ids == tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True))
    assert "<|im_start|>ipython\n" in tok.decode(job.prompt_ids, skip_special_tokens=False)
    assert _refused(tok, "chat", messages=[{"role": 5, "content": "x"}]).param == "messages.0.role"


EFFORT_TEMPLATE = ("effort={{ reasoning_effort | default('unset') }} thinking={{ enable_thinking | default('unset') }}"
                   "{% for m in messages %} {{ m.content }}{% endfor %}")


@pytest.fixture
def effort_tok():
    from pathlib import Path

    from detok.tokenizer.hf import HFTokenizer

    t = HFTokenizer.from_path(Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen2")
    t.set_chat_template(EFFORT_TEMPLATE)
    return t


@pytest.mark.parametrize(("body", "rendered"), [
    ({}, "effort=unset thinking=unset"),
    ({"reasoning_effort": "low"}, "effort=low thinking=True"),
    ({"reasoning_effort": "none"}, "effort=none thinking=False"),
    # the client's own enable_thinking stands; the top-level effort wins over the kwargs' one
    ({"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True, "reasoning_effort": "high"}},
     "effort=none thinking=True"),
])
def test_reasoning_effort_reaches_the_template(effort_tok, body, rendered):
    # vLLM's ChatCompletionRequest.build_chat_params: reasoning_effort is a template variable and turns
    # enable_thinking on ("none": off) unless chat_template_kwargs sets it (vLLM #43401, #54616)
    job = _job(effort_tok, "chat", messages=USER, **body)
    assert effort_tok.decode(job.prompt_ids, skip_special_tokens=False) == f"{rendered} Once upon"


def test_reasoning_effort_values_are_vllms(tok):
    assert _refused(tok, "chat", messages=USER, reasoning_effort="extreme").param == "reasoning_effort"


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_parsed_tool_calls_keep_special_tokens(tok):
    # vLLM's tool parsers (hermes, qwen3_coder, mistral, ... `adjust_request`) and SGLang's chat serving
    # set skip_special_tokens=False for a request whose tool calls are parsed: their markers are special
    # tokens in many vocabularies; any text around them (a marker mentioned in reasoning) keeps them too
    tools = ServingLimits("m", 64, reasoning_parser="qwen3", tool_parser="hermes")
    assert not _job(tok, "chat", tools, messages=USER, tools=[TOOL]).params.skip_special_tokens
    assert not _job(tok, "chat", tools, messages=USER, tools=[TOOL], skip_special_tokens=True).params.skip_special_tokens
    # nothing parsed as calls: the request's value (default true)
    assert _job(tok, "chat", tools, messages=USER, tools=[TOOL], tool_choice="none").params.skip_special_tokens
    assert _job(tok, "chat", tools, messages=USER).params.skip_special_tokens
    assert _job(tok, "chat", messages=USER, tools=[TOOL], tool_choice="none").params.skip_special_tokens
    assert not _job(tok, "chat", tools, messages=USER, skip_special_tokens=False).params.skip_special_tokens


def test_a_requests_stream_interval_may_only_raise_the_servers(tmp_path, tok):
    # vLLM's per-request `stream_interval` (ge=1): "Raises the server's --stream-interval for this
    # request. Values below the server setting are clamped up to it." (How chunks are then cut:
    # tests/frontend/test_chunks.py, on stream_events itself; here the request's way there.)
    assert _job(tok, "chat", messages=USER, stream=True, stream_interval=3).stream_interval == 3
    assert _job(tok, "completion", prompt="hi", stream=True).stream_interval == 1
    assert effective_interval(1, 3) == 3 and effective_interval(4, 2) == 4 and effective_interval(4, 1) == 4
    for bad in (0, -1, 1.5, "2"):
        assert _refused(tok, "chat", messages=USER, stream=True, stream_interval=bad).param == "stream_interval"

    async def main() -> None:
        async with running_app(tmp_path, tok, stream_interval=2) as run:  # served, joined text unchanged
            body = {"model": MODEL, "messages": USER, "seed": 4, "stream": True, "stream_interval": 3}
            events = _events((await run.http.post("/v1/chat/completions", json=body)).text)
            assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) \
                == "seed 4 says hello"

    asyncio.run(main())


# ---- vLLM's own fields: served, or refused by name (none silently ignored) ----------------------------


@pytest.mark.parametrize("field,value", [
    ("thinking_token_budget", 100), ("logprob_token_ids", [1, 2]), ("repetition_detection", {"n": 3}),
    ("priority", 5), ("kv_transfer_params", {"a": 1}), ("ec_transfer_params", {}), ("vllm_xargs", {"k": 1}),
    ("watermarking", True),
])
def test_vllm_engine_options_are_refused_by_name(tok, field, value):
    for kind, body in (("chat", {"messages": USER}), ("completion", {"prompt": "hi"})):
        error = _refused(tok, kind, **body, **{field: value})
        assert error.status == 400 and error.param == field, (kind, field)


def test_every_refusal_rule_accepts_its_fields_default_and_refuses_a_given_value(tok):
    # (refusals._apply reads only the fields a request gave: a default must pass every rule)
    from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest
    from detok.api.refusals import _CHAT, _COMMON, _COMPLETION

    for model, rules in ((ChatCompletionRequest, {**_COMMON, **_CHAT}), (CompletionRequest, {**_COMMON, **_COMPLETION})):
        for name, (harmless, _why) in rules.items():
            assert harmless(model.model_fields[name].get_default()), name
    kind_of = {**{k: "both" for k in _COMMON}, **{k: "chat" for k in _CHAT}, **{k: "completion" for k in _COMPLETION}}
    bad = {"response_format": {"type": "json_object"}, "use_beam_search": True, "best_of": 3, "guided_choice": ["a"],
           "structured_outputs": {"json": {}}, "prompt_logprobs": 1, "logits_processors": ["x"],
           "structural_tag": "t", "guided_grammar": "g", "guided_regex": "r", "guided_json": {"type": "object"},
           "suffix": "s", "functions": [{"name": "f"}], "function_call": "auto", "chat_template": "{{ x }}",
           "thinking_token_budget": 100, "logprob_token_ids": [1], "repetition_detection": {"n": 3}, "priority": 5,
           "kv_transfer_params": {}, "ec_transfer_params": {}, "vllm_xargs": {}, "watermarking": True}
    assert set(bad) == set(kind_of)
    for name, value in bad.items():
        for kind in (("chat", "completion") if kind_of[name] == "both" else (kind_of[name],)):
            body = {"messages": USER} if kind == "chat" else {"prompt": "hi"}
            assert _refused(tok, kind, **body, **{name: value}).param == name, (kind, name)


def test_vllm_options_at_their_defaults_are_served(tok):
    defaults = {"thinking_token_budget": -1, "priority": 0, "watermarking": False,
                "cache_salt": "s" * 1024, "session_id": "conversation-7"}
    assert _job(tok, "chat", messages=USER, **defaults).prompt_ids
    for salt in ("", "s" * 1025):  # vLLM's bounds
        assert _refused(tok, "chat", messages=USER, cache_salt=salt).param == "cache_salt"


def test_the_response_id_is_the_clients_request_id_or_x_request_id(tmp_path, tok):
    # vLLM's _base_request_id: an X-Request-Id header, else the body's request_id, else a random uuid hex
    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            body = {"model": MODEL, "messages": USER, "request_id": "trace-42"}
            assert (await run.http.post("/v1/chat/completions", json=body)).json()["id"] == "chatcmpl-trace-42"
            chunks = _events((await run.http.post("/v1/chat/completions", json={**body, "stream": True})).text)
            assert {c["id"] for c in chunks} == {"chatcmpl-trace-42"}
            headed = await run.http.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "request_id": "b"},
                                         headers={"X-Request-Id": "from-the-gateway"})
            assert headed.json()["id"] == "cmpl-from-the-gateway"
            plain = (await run.http.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})).json()["id"]
            assert plain.startswith("cmpl-") and len(plain) == 5 + 32 and int(plain[5:], 16) >= 0
            # bounded: the id is in every chunk of the response
            long_header = await run.http.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                                              headers={"X-Request-Id": "x" * 257})
            assert long_header.status_code == 400 and long_header.json()["error"]["param"] == "X-Request-Id"
            long_body = await run.http.post("/v1/completions", json={"model": MODEL, "prompt": "hi",
                                                                     "request_id": "x" * 257})
            assert long_body.status_code == 400 and long_body.json()["error"]["param"] == "request_id"
            assert len(run.scheduler.requests) == 4  # (the refused ones reached no scheduler)

    asyncio.run(main())


def test_return_prompt_text_gives_the_rendered_prompt_in_the_body_or_the_first_chunk(tmp_path, tok):
    # vLLM 0.21's `return_prompt_text`: the chat-templated prompt as `prompt_text` of the response,
    # or of the stream's first chunk only
    rendered = tok.apply_chat_template(USER, add_generation_prompt=True)
    assert _job(tok, "chat", messages=USER, return_prompt_text=True).prompt_text == rendered

    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            body = {"model": MODEL, "messages": USER, "seed": 3, "return_prompt_text": True}
            whole = (await run.http.post("/v1/chat/completions", json=body)).json()
            assert whole["prompt_text"] == rendered and whole["choices"][0]["message"]["content"] == "seed 3 says hello"
            assert "prompt_text" not in (await run.http.post("/v1/chat/completions", json={**body, "return_prompt_text": False})).json()
            chunks = _events((await run.http.post("/v1/chat/completions", json={**body, "stream": True, "n": 2})).text)
            # (vLLM: in each choice's role chunk, which open the stream)
            roles = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("role")]
            assert [(c["choices"][0]["index"], c["prompt_text"]) for c in roles] == [(0, rendered), (1, rendered)]
            assert all("prompt_text" not in c for c in chunks if c not in roles)

    asyncio.run(main())


def test_sampling_extras_are_carried_to_the_scheduler(tmp_path, tok):
    # min_p, the penalties and logit_bias (clamped to +-100, as vLLM) reach GenerateRequest.extras;
    # a request at vLLM's defaults carries none
    from detok.wire.to_scheduler import SamplingExtras

    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            body = {"model": MODEL, "messages": USER, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
                    "repetition_penalty": 1.2, "logit_bias": {"7": 250, "9": -3.5}}
            assert (await run.http.post("/v1/chat/completions", json=body)).status_code == 200
            await run.http.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "repetition_penalty": 1.0})
            first, second = run.scheduler.requests
            assert first.extras == SamplingExtras(0.1, 0.5, -0.5, 1.2, ((7, 100.0), (9, -3.5)))
            assert second.extras is None

    asyncio.run(main())


def test_bad_words_are_tokenized_as_vllm_and_allowed_ids_checked(tok):
    # vLLM's update_from_tokenizer: the word's ids, and those after a space where that is another
    # first token of the same length
    extras = _job(tok, "chat", messages=USER, bad_words=["sea", "  Paris"], allowed_token_ids=[1, 2]).extras
    plain, spaced = tuple(tok.encode("sea")), tuple(tok.encode(" sea"))
    assert plain[0] != spaced[0] and len(plain) == len(spaced)
    assert extras.bad_words[:2] == (plain, spaced) and extras.bad_words[2] == tuple(tok.encode("Paris"))
    assert extras.allowed_token_ids == (1, 2)
    for body, param in (({"bad_words": [" "]}, "bad_words"), ({"bad_words": ["x"] * 129}, "bad_words"),
                        ({"bad_words": ["x" * 257]}, "bad_words"), ({"allowed_token_ids": []}, "allowed_token_ids"),
                        ({"allowed_token_ids": [10**7]}, "allowed_token_ids"),
                        ({"allowed_token_ids": [-1]}, "allowed_token_ids"),
                        ({"allowed_token_ids": [1] * 65537}, "allowed_token_ids")):
        assert _refused(tok, "chat", messages=USER, **body).param.startswith(param), body


def test_llama3_json_keeps_the_requests_skip_special_tokens(tok):
    # vLLM's Llama3JsonToolParser has no adjust_request: the request's value stands (default true, so
    # Llama 3.1's special `<|python_tag|>` is skipped from the text; the worker still reads it by id)
    llama = ServingLimits("m", 64, tool_parser="llama3_json")
    assert _job(tok, "chat", llama, messages=USER, tools=[TOOL]).params.skip_special_tokens
    kept = _job(tok, "chat", llama, messages=USER, tools=[TOOL], skip_special_tokens=False)
    assert not kept.params.skip_special_tokens


def test_kimi_k3_reasoning_keeps_special_tokens(tok):
    # vLLM's kimi_k3 reasoning parser sets skip_special_tokens=False: its think channel's terminals are
    # text of special tokens (`<|open|>think<|sep|>`), which a skipping decode would leave out
    k3 = ServingLimits("m", 64, reasoning_parser="kimi_k3")
    assert not _job(tok, "chat", k3, messages=USER).params.skip_special_tokens
    assert not _job(tok, "chat", k3, messages=USER, skip_special_tokens=True).params.skip_special_tokens
    # a family whose terminals are matched by id leaves the request's value
    assert _job(tok, "chat", ServingLimits("m", 64, reasoning_parser="gemma4"), messages=USER).params.skip_special_tokens


def test_chat_logprobs_are_asked_rendered_by_the_workers(tmp_path, tok):
    # a chat request with logprobs asks its workers for the chat items (logprobs_form "chat"); with
    # tokens named by id, for completions and without logprobs, the entries form
    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            chat = {"model": MODEL, "messages": USER, "max_tokens": 2}
            for body in ({**chat, "logprobs": True, "top_logprobs": 3}, {**chat, "logprobs": True},
                         {**chat, "logprobs": True, "return_tokens_as_token_ids": True}, chat,
                         {**chat, "return_token_ids": True}):
                assert (await run.http.post("/v1/chat/completions", json=body)).status_code == 200
            body = {"model": MODEL, "prompt": "hi", "logprobs": 2, "max_tokens": 2}
            assert (await run.http.post("/v1/completions", json=body)).status_code == 200
            got = [(r.logprobs, r.logprobs_form) for r in run.scheduler.requests]
            assert got == [(3, "chat"), (0, "chat"), (0, "entries"), (None, "entries"), (0, "entries"), (2, "entries")]

    asyncio.run(main())
