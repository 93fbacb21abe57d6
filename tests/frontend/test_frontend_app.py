"""The frontend app in process, its real sockets answered by a fake scheduler + worker
(`tests/helpers/frontend_harness.py`), driven by the `openai` SDK and raw HTTP: what reaches the chat
template and the scheduler, nulls, n > 1, stop_reason, response ids, health and the watchdog,
and that a request failing after acceptance leaves nothing open."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from detok.streaming import sse
from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest
from detok.wire.to_scheduler import GenerateRequest
from detok.wire.params import Finish
from detok.tokenizer.hf import HFTokenizer
from tests.helpers.frontend_harness import MODEL, running_app
from tests.helpers.waiting import async_wait_until

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Prints what a template sees of each message: role, name, tool_call_id, content, and for tool
# calls the arguments as printed (`{{ }}`), as JSON (`| tojson`) and as a mapping (`.keys()`).
TOOL_ECHO_TEMPLATE = """\
{%- for message in messages -%}
<{{ message.role }}{% if message.name %} name={{ message.name }}{% endif %}\
{% if message.tool_call_id %} for={{ message.tool_call_id }}{% endif %}>{{ message.content }}
{%- for tc in message.tool_calls or [] %}[call {{ tc.id }} {{ tc.function.name }} raw={{ tc.function.arguments }} \
json={{ tc.function.arguments | tojson }} keys={{ tc.function.arguments.keys() | list | join(',') }}]{% endfor -%}
</{{ message.role }}>
{% endfor -%}
{%- if tools %}<tools>{{ tools | tojson }}</tools>{% endif -%}
{%- if add_generation_prompt %}<assistant>{% endif -%}"""

PARTS_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{% for p in m['content'] %}[{{ p.type }}:{{ p.text }}]{% endfor %}" \
                 "{% endfor %}"

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def qwen2() -> HFTokenizer:
    return HFTokenizer.from_path(FIXTURES / "hf" / "qwen2")


@pytest.fixture
def tok(qwen2: HFTokenizer) -> HFTokenizer:
    qwen2.set_chat_template(TOOL_ECHO_TEMPLATE)
    return qwen2


def _prompt(tok: HFTokenizer, request: GenerateRequest) -> str:
    return tok.decode(request.prompt_ids, skip_special_tokens=False)


# ---- messages as the template receives them ----------------------------------------------------


def test_two_turn_tool_conversation_reaches_the_template(tmp_path, tok):
    arguments = '{"city":  "Paris", "unit": "°C"}'  # the client's own spacing, non-ASCII kept
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21 °C, sunny"},
    ]

    async def main() -> tuple[str, str]:
        async with running_app(tmp_path, tok) as run:
            await run.sdk.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="none")
            without = [messages[0], {"role": "assistant", "content": None}, {"role": "tool", "content": "21 °C, sunny"}]
            await run.sdk.chat.completions.create(model=MODEL, messages=without)
            return _prompt(tok, run.scheduler.requests[0]), _prompt(tok, run.scheduler.requests[1])

    prompt, plain = asyncio.run(main())
    assert ("[call call_1 get_weather raw={\"city\":  \"Paris\", \"unit\": \"°C\"} "
            "json={\"city\": \"Paris\", \"unit\": \"°C\"} keys=city,unit]") in prompt
    assert "<tool name=get_weather for=call_1>21 °C, sunny</tool>" in prompt
    assert "<assistant>[call call_1" in prompt  # null content reaches a string template as ""
    assert json.loads(prompt.split("<tools>")[1].split("</tools>")[0]) == [
        {"type": "function", "function": {**WEATHER["function"]}}
    ]
    assert prompt.endswith("<assistant>")
    assert "call_1" not in plain and "<tools>" not in plain  # the same turns without them render without


def test_content_parts_reach_a_template_that_loops_over_them(tmp_path, tok):
    tok.set_chat_template(PARTS_TEMPLATE)
    messages = [{"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}]

    async def main() -> str:
        async with running_app(tmp_path, tok) as run:
            await run.sdk.chat.completions.create(model=MODEL, messages=messages)
            return _prompt(tok, run.scheduler.requests[0])

    assert asyncio.run(main()) == "<user>[text:a]<user>[text:b][text:c]"


@pytest.mark.parametrize(("arguments", "fragment"), [("{bad", "not valid JSON"), ("[1, 2]", "must be a JSON object")])
def test_bad_tool_call_arguments_are_400_naming_them(tmp_path, tok, arguments, fragment):
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                                                     {"id": "b", "type": "function", "function": {"name": "f", "arguments": arguments}}]}]

    async def main() -> dict:
        async with running_app(tmp_path, tok) as run:
            r = await run.http.post("/v1/chat/completions", json={"messages": messages})
            assert r.status_code == 400 and not run.scheduler.requests
            return r.json()["error"]

    error = asyncio.run(main())
    assert error["param"] == "messages.1.tool_calls.1.function.arguments" and fragment in error["message"]


# ---- nulls, refusals ------------------------------------------------------------------------


def _all_nulls(model: type) -> dict:
    return {name: None for name, field in model.model_fields.items() if not field.is_required()}


def test_null_means_not_given_for_every_optional_field(tmp_path, tok):
    async def main() -> tuple[dict, dict]:
        async with running_app(tmp_path, tok) as run:
            chat = await run.http.post("/v1/chat/completions", json={
                **_all_nulls(ChatCompletionRequest), "messages": [{"role": "user", "content": "x", "name": None,
                                                                   "tool_calls": None, "tool_call_id": None}]})
            text = await run.http.post("/v1/completions", json={**_all_nulls(CompletionRequest), "prompt": "x"})
            assert chat.status_code == 200, chat.text
            assert text.status_code == 200, text.text
            return chat.json(), text.json()

    chat, text = asyncio.run(main())
    assert ChatCompletion.model_validate(chat).choices[0].message.content == "seed 0 says hello"
    assert Completion.model_validate(text).model == MODEL  # no model given: the served one


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [WEATHER]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tools": []}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"guided_json": {"type": "object"}}, "guided_json"),
        ({"prompt_logprobs": 1}, "prompt_logprobs"),
        ({"chat_template": "{{ messages }}"}, "chat_template"),
        ({"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs"),
        ({"stream": "yes"}, "stream"),
        ({"seed": 2**63}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"n": 0}, "n"),
        ({"logit_bias": {"999999999": 1}}, "logit_bias"),
        ({"n": 2, "temperature": 0}, "n"),  # greedy choices would be equal (vLLM refuses them too)
        ({"stop": ["é" * 1000] * 20}, "stop"),  # 20 x 2000 bytes: past the total
        ({"stop_token_ids": [1] * 257}, "stop_token_ids"),
        ({"messages": [{"role": "user", "content": "x"}] * 2049}, "messages"),
    ],
)
def test_options_the_server_cannot_honour_are_400_naming_them(tmp_path, tok, body, param):
    async def main() -> dict:
        async with running_app(tmp_path, tok) as run:
            r = await run.http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], **body})
            assert r.status_code == 400, r.text
            assert not run.scheduler.requests and run.state.link.receiver.open_count == 0
            return r.json()["error"]

    error = asyncio.run(main())
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]


def test_tool_choice_none_renders_tools_and_refusals_through_the_sdk(tmp_path, tok):
    async def main() -> str:
        async with running_app(tmp_path, tok) as run:
            with pytest.raises(openai.BadRequestError) as info:
                await run.sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                      tools=[WEATHER])
            assert info.value.body["param"] == "tools" and "tool-call parsing" in info.value.body["message"]
            ok = await run.sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                       tools=[WEATHER], tool_choice="none")
            assert ok.choices[0].message.tool_calls is None
            return _prompt(tok, run.scheduler.requests[0])

    assert "get_weather" in asyncio.run(main())


# ---- n, seeds, usage, stop_reason, ids ------------------------------------------------------------


def test_n_choices_have_own_rids_and_seeds_and_stream_as_they_collect(tmp_path, tok):
    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            whole = await run.sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                          n=3, seed=2**63 - 2)
            raw = await run.http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "x"}], "n": 3, "seed": 2**63 - 2, "stream": True,
                "stream_options": {"include_usage": True}})
            chunks = [ChatCompletionChunk.model_validate(json.loads(p))
                      for p in sse.parse_events(iter(raw.text.splitlines(keepends=True))) if p != "[DONE]"]
            sent = run.scheduler.requests
            assert len({r.rid for r in sent}) == 6
            assert [r.seed for r in sent[:3]] == [2**63 - 2, 2**63 - 1, -(2**63)]  # distinct, wrapping in int64
            texts = {i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
                     for i in range(3)}
            assert texts == {c.index: c.message.content for c in whole.choices}
            assert len(set(texts.values())) == 3
            assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 9  # summed
            assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens == len(sent[0].prompt_ids)  # once
            assert whole.id.startswith("chatcmpl-") and len(whole.id) == len("chatcmpl-") + 32
            assert chunks[0].id != whole.id and int(whole.id[len("chatcmpl-"):], 16) >= 0  # (hex, one per response)
            assert str(sent[0].rid) not in whole.id and f"{sent[0].rid:016x}" not in whole.id

    asyncio.run(main())


def test_stop_reason_as_vllm(tmp_path, tok):
    eos = tok.token_to_id(tok.special_tokens.eos)
    finishes = {1: Finish("stop", eos), 2: Finish("stop", 7), 3: Finish("stop", "END"), 4: Finish("length")}

    def reply(request: GenerateRequest):
        return ["text"], finishes[request.seed], 1

    async def main() -> list:
        async with running_app(tmp_path, tok, reply=reply) as run:
            out = []
            for seed in finishes:
                r = await run.sdk.completions.create(model=MODEL, prompt="x", seed=seed)
                out.append((r.choices[0].finish_reason, r.choices[0].model_extra["stop_reason"]))
            kept = await run.sdk.completions.create(model=MODEL, prompt="x", seed=1, extra_body={"ignore_eos": True})
            out.append(kept.choices[0].model_extra["stop_reason"])
            return out

    # null for the primary EOS (unless ignore_eos made it an ordinary stop id), the id, the string
    assert asyncio.run(main()) == [("stop", None), ("stop", 7), ("stop", "END"), ("length", None), eos]


def test_echo_prepends_the_prompt(tmp_path, tok):
    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            r = await run.sdk.completions.create(model=MODEL, prompt="Once upon", echo=True, seed=4)
            assert r.choices[0].text == "Once uponseed 4 says hello"
            chunks = [c async for c in await run.sdk.completions.create(model=MODEL, prompt="Once upon", echo=True,
                                                                        seed=4, stream=True)]
            assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text

    asyncio.run(main())


# ---- nothing is left open ------------------------------------------------------------------------


class _BrokenEncoder:
    def __init__(self, ok: int = 0) -> None:
        self.ok = ok

    def encode(self, message: object) -> bytes:
        if self.ok > 0:
            self.ok -= 1
            return b"\x90"  # a malformed message the fake scheduler never sees decoded
        raise OverflowError("cannot encode")


def test_requests_failing_after_acceptance_release_everything(tmp_path, tok):
    async def main() -> None:
        async with running_app(tmp_path, tok) as run:
            link, receiver = run.state.link, run.state.link.receiver
            link._encoder = _BrokenEncoder()  # fails after the streams were opened in the receiver
            for _ in range(1000):
                r = await run.http.post("/v1/completions", json={"prompt": "x", "n": 2})
                assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
            assert receiver.open_count == 0
            link._encoder = _BrokenEncoder(ok=1)  # the first choice reaches the scheduler, the second fails
            r = await run.http.post("/v1/completions", json={"prompt": "x", "n": 2})
            assert r.status_code == 500 and receiver.open_count == 0

    asyncio.run(main())


# ---- health and the watchdog -------------------------------------------------------------------


def test_admission_asks_the_scheduler_alone_where_the_stack_can_tell(tmp_path, tok):
    """With `scheduler_serving` (the stack's cheap check), admission asks it per request, not
    health(): refused (503) while it says down though health() still says up, served again after."""
    up = [True]

    async def main() -> None:
        async with running_app(tmp_path, tok, health=lambda: {"pool": True, "scheduler": True},
                               scheduler_serving=lambda: up[0]) as run:
            body = {"prompt": "x", "max_tokens": 2}
            assert (await run.http.post("/v1/completions", json=body)).status_code == 200
            up[0] = False
            refused = await run.http.post("/v1/completions", json=body)
            assert refused.status_code == 503 and refused.json()["error"]["type"] == "service_unavailable"
            up[0] = True
            assert (await run.http.post("/v1/completions", json=body)).status_code == 200

    asyncio.run(main())


def test_watchdog_fails_only_what_a_lost_scheduler_held(tmp_path, tok):
    parts = {"pool": True, "scheduler": True}
    generation = [1]
    polls = [0]  # the watchdog asks health() at every poll: "two polls later" instead of a sleep

    def health_of() -> dict[str, bool]:
        polls[0] += 1
        return dict(parts)

    async def two_polls() -> None:
        start = polls[0]
        await async_wait_until(lambda: polls[0] >= start + 2, 60, what="two watchdog polls")

    def hang(request: GenerateRequest):
        return None  # the scheduler never answers: requests stay in flight

    async def main() -> None:
        async with running_app(tmp_path, tok, reply=hang, health=health_of,
                               health_detail=lambda: {"workers": ["serving"]},
                               scheduler_generation=lambda: generation[0]) as run:
            body = {"prompt": "x"}
            a = asyncio.ensure_future(run.http.post("/v1/completions", json=body))
            open_streams = lambda: run.state.link.receiver.open_count  # noqa: E731
            await async_wait_until(lambda: open_streams() == 1, 60, what="request a in flight")
            parts["pool"] = False  # a worker down: degraded, nothing failed
            await two_polls()  # that must change nothing
            health = await run.http.get("/health")
            assert health.status_code == 200 and health.json()["status"] == "degraded"
            assert health.json()["detail"] == {"workers": ["serving"]}
            assert not a.done()
            generation[0] = 2  # the scheduler restarted: what it held is lost, newer requests live
            b = asyncio.ensure_future(run.http.post("/v1/completions", json=body))
            r = await asyncio.wait_for(a, 60)
            assert r.status_code == 500 and "scheduler restarted" in r.json()["error"]["message"]
            await async_wait_until(lambda: open_streams() == 1, 60, what="request b in flight")
            await two_polls()  # that must not fail b
            assert not b.done()
            parts["scheduler"] = False  # down: 503, and the rest fails
            r = await asyncio.wait_for(b, 60)
            assert r.status_code == 500 and "scheduler is down" in r.json()["error"]["message"]
            assert (await run.http.get("/health")).status_code == 503
            refused = await run.http.post("/v1/completions", json=body)
            assert refused.status_code == 503 and refused.json()["error"]["type"] == "service_unavailable"
            assert run.state.link.receiver.open_count == 0

    asyncio.run(main())
