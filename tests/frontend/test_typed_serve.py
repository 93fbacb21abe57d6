"""Typed output over HTTP (reasoning, content, tool calls): `detok serve --workload echo` with the qwen3
reasoning parser and the hermes tool-call parser on a real Qwen3.6 vocabulary (`<think>`, `<tool_call>`
single tokens), tokens arriving 1-4 per step; the openai SDK (streamed and not) and langchain-openai
assemble the reasoning and the tool calls; hostile inputs are clear 400s; bad parser options fail the
start."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from importlib import resources

import openai
import pytest

import detok

from tests.helpers.serve_helpers import LiveServer, serve_command
from tests.helpers.tokenizers_available import qwen3_6_tiktoken

pytestmark = pytest.mark.timeout(300)
MODEL = "detok-stub"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
REPLY = ('<think>The user wants the weather in Paris. 北京 🫨</think>Let me check that.<tool_call>\n'
         '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
         '{"name": "get_time", "arguments": {}}\n</tool_call>')
REASONING = "The user wants the weather in Paris. 北京 🫨"
CALLS = [("get_weather", {"city": "Paris"}), ("get_time", {})]


def _template() -> str:
    return str(resources.files("detok") / "_data" / "qwen2" / "chat_template.jinja")


def _start(*extra: str) -> LiveServer:
    return LiveServer("--workers", "2", "--no-spare", "--step-ms", "2", "--tokenizer", str(qwen3_6_tiktoken()),
                      "--chat-template", _template(), "--workload", "echo", "--tokens-per-step", "1-4",
                      "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", *extra)


@pytest.fixture(scope="module")
def server():
    live = _start()
    try:
        yield live
    finally:
        code = live.stop(signal.SIGTERM)
        live.kill_group()
    assert code == 0, live.output


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", timeout=60, max_retries=0)


def _ask(client, content: str = REPLY, **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("tools", [WEATHER, TIME])
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kw)


def _calls(message) -> list[tuple[str, dict]]:  # type: ignore[no-untyped-def]
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]


def test_non_streamed_body(client) -> None:  # type: ignore[no-untyped-def]
    r = _ask(client)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check that."
    assert choice.message.model_extra["reasoning"] == REASONING
    assert _calls(choice.message) == CALLS
    ids = [c.id for c in choice.message.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


def test_streamed_chunks_assemble_to_the_body(client) -> None:  # type: ignore[no-untyped-def]
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in _ask(client, stream=True):
        for choice in chunk.choices:
            d = choice.delta
            extra = d.model_extra or {}
            assert not (extra.get("reasoning") and d.content), "reasoning and content of a step in separate chunks"
            reasoning += extra.get("reasoning") or ""
            content += d.content or ""
            for tc in d.tool_calls or ():
                if tc.index not in calls:  # the first chunk of a call: id, type and name
                    assert tc.id and tc.type == "function" and tc.function.name
                    calls[tc.index] = [tc.function.name, tc.function.arguments or ""]
                else:  # later: argument fragments only
                    assert tc.id is None and tc.function.name is None
                    calls[tc.index][1] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    assert (reasoning, content, finish) == (REASONING, "Let me check that.", "tool_calls")
    assert [(n, json.loads(a)) for n, a in calls.values()] == CALLS


def test_sdk_stream_helper_gets_the_final_tool_calls(client) -> None:  # type: ignore[no-untyped-def]
    with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": REPLY}],
                                        tools=[WEATHER, TIME]) as stream:
        final = stream.get_final_completion()
    assert _calls(final.choices[0].message) == CALLS and final.choices[0].finish_reason == "tool_calls"


def test_langchain_openai_assembles_tool_calls(server) -> None:  # type: ignore[no-untyped-def]
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(model=MODEL, base_url=server.base_url + "/v1", api_key="none", max_retries=0)
    bound = llm.bind_tools([WEATHER, TIME])
    message = bound.invoke(REPLY)
    assert [(c["name"], c["args"]) for c in message.tool_calls] == CALLS
    assert message.content == "Let me check that."
    total = None
    for chunk in bound.stream(REPLY):
        total = chunk if total is None else total + chunk
    assert [(c["name"], c["args"]) for c in total.tool_calls] == CALLS
    assert total.content == "Let me check that."


def test_length_stays_length(client) -> None:  # type: ignore[no-untyped-def]
    r = _ask(client, max_tokens=30)
    assert r.choices[0].finish_reason == "length"


def test_include_reasoning_false_and_one_call_without_parallel(client) -> None:  # type: ignore[no-untyped-def]
    r = _ask(client, parallel_tool_calls=False, extra_body={"include_reasoning": False})
    message = r.choices[0].message
    assert "reasoning" not in (message.model_extra or {}) and _calls(message) == CALLS[:1]
    assert r.choices[0].finish_reason == "tool_calls"


def test_include_reasoning_false_hides_logprobs_streamed_or_not(client) -> None:  # type: ignore[no-untyped-def]
    # vLLM: with a parser, include_reasoning=false makes every choice's and chunk's logprobs null
    # (the reasoning's tokens must not show through them); with reasoning kept, they are there
    hidden = {"include_reasoning": False}
    assert _ask(client, logprobs=True, top_logprobs=2, extra_body=hidden).choices[0].logprobs is None
    chunks = list(_ask(client, logprobs=True, top_logprobs=2, extra_body=hidden, stream=True))
    assert chunks and all(c.logprobs is None for chunk in chunks for c in chunk.choices)
    shown = _ask(client, logprobs=True, top_logprobs=2).choices[0].logprobs
    assert shown is not None and any("The user" in "".join(e.token for e in shown.content[i:i + 3])
                                     for i in range(len(shown.content)))


def test_return_token_ids_with_parsed_output_streamed_equal_non_streamed(client) -> None:  # type: ignore[no-untyped-def]
    # the ids of every token (reasoning, markers, calls) in order, streamed or not, with tokens
    # arriving 1-4 per step; each step's ids ride its first chunk. include_reasoning false hides them
    # (vLLM's hide_stream_metadata / suppress_metadata: they would show the reasoning), not the prompt's
    tok = detok.load_tokenizer(str(qwen3_6_tiktoken()))
    whole = _ask(client, extra_body={"return_token_ids": True})
    ids = whole.choices[0].model_extra["token_ids"]
    assert tok.decode(ids, skip_special_tokens=False).startswith(REPLY)
    streamed = [i for chunk in _ask(client, extra_body={"return_token_ids": True}, stream=True) for c in chunk.choices
                for i in (c.model_extra or {}).get("token_ids") or ()]
    assert streamed == ids
    hidden = {"return_token_ids": True, "include_reasoning": False}
    body = _ask(client, extra_body=hidden)
    assert "token_ids" not in body.choices[0].model_extra and body.model_extra["prompt_token_ids"]
    chunks = list(_ask(client, extra_body=hidden, stream=True))
    assert not any("token_ids" in (c.model_extra or {}) for chunk in chunks for c in chunk.choices)


def test_no_call_is_stop_with_null_tool_calls_content(client) -> None:  # type: ignore[no-untyped-def]
    r = _ask(client, content="<think>hmm</think>Just text.")
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == "Just text."
    assert not r.choices[0].message.tool_calls
    only = _ask(client, content="<think>only thinking</think>")
    assert only.choices[0].message.content is None


def test_tool_choice_none_parses_no_calls_and_enable_thinking_false(client) -> None:  # type: ignore[no-untyped-def]
    r = _ask(client, tool_choice="none")
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason == "stop"
    plain = _ask(client, content="no think markers", extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert plain.choices[0].message.content == "no think markers"
    thinking = _ask(client, content="all reasoning")  # qwen3: thinking on by default, no </think>
    assert thinking.choices[0].message.model_extra["reasoning"] == "all reasoning"


def test_reasoning_effort_none_turns_thinking_off(client) -> None:  # type: ignore[no-untyped-def]
    # vLLM: reasoning_effort "none" is enable_thinking false for the template and the parser
    plain = _ask(client, content="no think markers", reasoning_effort="none")
    assert plain.choices[0].message.content == "no think markers"
    thinking = _ask(client, content="all reasoning", reasoning_effort="low")
    assert thinking.choices[0].message.model_extra["reasoning"] == "all reasoning"


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tool_choice": "required"}, "tool_choice", "constrained"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice", "constrained"),
    ({"tools": [WEATHER] * 300}, "tools", ""),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": json.loads("{\"a\":" * 40 + "1"
                                                                                         + "}" * 40)}}]},
     "tools", "nest"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"d": "x" * 70_000}}}]},
     "tools", "bytes"),
])
def test_hostile_tools_are_400(client, body, param, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                       **{"tools": [WEATHER], **body})
    error = info.value.body
    assert error["param"] == param and words in error["message"]


@pytest.mark.parametrize(("args", "named"), [
    (("--reasoning-parser", "no_such_family"), "no_such_family"),
    (("--tool-call-parser", "nope"), "nope"),
    (("--reasoning-parser", "mistral"), "[THINK]"),  # Qwen2's vocabulary has no [THINK] token
])
def test_bad_parser_options_fail_the_start_naming_them(args, named) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(serve_command("--port", "0", "--workers", "1", "--no-spare", *args),
                          capture_output=True, text=True, timeout=120, env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    assert done.returncode != 0 and named in done.stderr + done.stdout


def test_reasoning_content_field() -> None:
    live = _start("--reasoning-field", "reasoning_content", "--workers", "1")  # a frontend option: one worker does
    try:
        client = openai.OpenAI(base_url=live.base_url + "/v1", api_key="none", timeout=60, max_retries=0)
        r = _ask(client)
        assert r.choices[0].message.model_extra["reasoning_content"] == REASONING
        assert "reasoning" not in r.choices[0].message.model_extra
        streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                           for c in _ask(client, stream=True) if c.choices)
        assert streamed == REASONING
    finally:
        assert live.stop(signal.SIGTERM) == 0
        live.kill_group()
    assert sys.executable


NO_THINK_CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize("kwargs", [{}, {"chat_template_kwargs": {"enable_thinking": False}}],
                         ids=["thinking_default", "thinking_off"])
def test_a_call_without_think_comes_back(client, kwargs) -> None:  # type: ignore[no-untyped-def]
    """Issue 45: qwen3 + hermes, a reply without `<think>` holding a `<tool_call>` JSON block: the
    tool-call start ends reasoning (thinking on by default) and the call comes back."""
    r = _ask(client, content=NO_THINK_CALL, extra_body=kwargs)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and _calls(choice.message) == [("get_time", {})]
    assert choice.message.content is None and choice.message.model_extra.get("reasoning") is None


def test_a_call_straight_from_the_thought_comes_back_streamed(client) -> None:  # type: ignore[no-untyped-def]
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in _ask(client, content="plan\n" + NO_THINK_CALL, stream=True):
        for choice in chunk.choices:
            d = choice.delta
            reasoning += (d.model_extra or {}).get("reasoning") or ""
            content += d.content or ""
            for tc in d.tool_calls or ():
                calls.setdefault(tc.index, [tc.function.name, ""])[1] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    assert (reasoning, content, finish) == ("plan\n", "", "tool_calls")
    assert [(n, json.loads(a)) for n, a in calls.values()] == [("get_time", {})]
