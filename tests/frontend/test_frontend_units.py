"""Frontend pieces without a server: request validation, OpenAI error JSON, SSE framing, and the
responses built from a delta stream (streamed and non-streamed from the same deltas)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.tokenizer.default import load_default_tokenizer
from detok.streaming import sse
from detok.api.errors import RequestError, error_json, from_validation_error
from detok.api.openai_requests import ChatCompletionRequest, CompletionRequest
from detok.api.responses import ResponseContext, collect_body, stream_events
from detok.api.validation import ServingLimits, chat_job, completion_job
from detok.receiver.receiver import RequestDelta
from detok.wire.params import Finish
from detok.tokenizer.hf import HFTokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LIMITS = ServingLimits("m", 64)


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def _completion(tok, **body):
    return completion_job(CompletionRequest.model_validate_json(json.dumps({"model": "m", **body})), tok, LIMITS)


def _chat(tok, **body):
    return chat_job(ChatCompletionRequest.model_validate_json(json.dumps({"model": "m", **body})), tok, LIMITS)


def _refused(fn, *args, **body) -> RequestError:
    with pytest.raises((RequestError, pydantic.ValidationError)) as info:
        fn(*args, **body)
    error = info.value
    return from_validation_error(error) if isinstance(error, pydantic.ValidationError) else error


# ---- validation --------------------------------------------------------------------------------


def test_completion_defaults(tok):
    job = _completion(tok, prompt="Hello world")
    assert job.prompt_ids == tok.encode("Hello world", add_special_tokens=True)
    assert job.max_tokens == 16 and job.seed == 0 and not job.stream and not job.include_usage
    assert job.params.stop == () and job.params.skip_special_tokens


def test_completion_prompt_forms_agree(tok):
    ids = tok.encode("Hello world")
    assert _completion(tok, prompt=["Hello world"]).prompt_ids == ids
    assert _completion(tok, prompt=ids).prompt_ids == ids
    assert _completion(tok, prompt=[ids]).prompt_ids == ids


def test_completion_params_reach_decode_params(tok):
    job = _completion(
        tok, prompt="x", max_tokens=9, min_tokens=2, stop=["a", "bc"], stop_token_ids=[5], seed=4,
        include_stop_str_in_output=True, skip_special_tokens=False, stream=True,
        stream_options={"include_usage": True}, ignore_eos=True, temperature=0.5,
    )
    p = job.params
    assert (job.max_tokens, job.seed, job.stream, job.include_usage, job.ignore_eos) == (9, 4, True, True, True)
    assert p.stop == ("a", "bc") and p.stop_token_ids == (5,) and p.min_tokens == 2
    assert p.include_stop_str_in_output and not p.skip_special_tokens
    assert _completion(tok, prompt="x", stop="end").params.stop == ("end",)


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"max_tokens": "3"}, "max_tokens", "valid integer"),
        ({"max_tokens": True}, "max_tokens", "valid integer"),
        ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"max_tokens": 64}, "max_tokens", "maximum context length is 64"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens", "must not exceed"),
        ({"min_tokens": -1}, "min_tokens", "greater than or equal to 0"),
        ({"n": 17}, "n", "less than or equal to 16"),
        ({"stop": [""]}, "stop", "must not be empty"),
        ({"stop": [1]}, "stop", "expected a string or an array"),
        ({"stop": ["s"] * 65}, "stop", "at most 64"),
        ({"stop_token_ids": [10**9]}, "stop_token_ids", "outside the vocabulary"),
        ({"stop_token_ids": [-1]}, "stop_token_ids.0", "greater than or equal to 0"),
        ({"logprobs": 2, "echo": True}, "echo", "prompt logprobs"),
        ({"logprobs": 21}, "logprobs", "less than or equal to 20"),  # vLLM's max_logprobs, both APIs
        ({"best_of": 3}, "best_of", "not implemented"),
        ({"suffix": "x"}, "suffix", "not implemented"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when stream"),
        ({"temperature": 3.0}, "temperature", "less than or equal to 2"),
        ({"prompt": ["a", "b"]}, "prompt", "one prompt per request"),
        ({"prompt": ""}, "prompt", "empty"),
        ({"prompt": [151936]}, "prompt", "outside the vocabulary"),
        ({"prompt": {"x": 1}}, "prompt", "expected a string or an array"),
        ({"prompt": " word" * 70}, "prompt", "maximum context length"),
    ],
)
def test_completion_refusals_name_the_parameter(tok, body, param, fragment):
    error = _refused(_completion, tok, **{"prompt": "hi", **body})
    assert error.status == 400 and error.param == param and fragment in error.message


def test_unknown_model_is_404(tok):
    error = _refused(
        completion_job, CompletionRequest.model_validate({"model": "gpt-4", "prompt": "x"}), tok, LIMITS
    )
    assert error.status == 404 and error.code == "model_not_found" and error.param == "model"


def test_unknown_fields_are_ignored(tok):
    assert _completion(tok, prompt="x", some_future_option={"a": 1}).max_tokens == 16


def test_chat_renders_the_template(tok):
    messages = [{"role": "user", "content": "Bonjour"}]
    job = _chat(tok, messages=messages)
    text = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert job.prompt_ids == tok.encode(text)
    assert text.endswith("<|im_start|>assistant\n") and "Bonjour" in text
    assert job.max_tokens == LIMITS.max_model_len - len(job.prompt_ids)  # chat: no default cap


def test_chat_content_parts_and_max_completion_tokens(tok):
    parts = [{"type": "text", "text": "Bon"}, {"type": "text", "text": "jour"}]
    job = _chat(tok, messages=[{"role": "user", "content": parts}], max_tokens=3, max_completion_tokens=5)
    # a string-content template gets the text parts joined with newlines, as vLLM joins them
    assert job.prompt_ids == _chat(tok, messages=[{"role": "user", "content": "Bon\njour"}]).prompt_ids
    assert job.max_tokens == 5


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": 5, "content": "x"}]}, "messages.0.role"),  # (any string is a role, as vLLM)
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages.0.content.0.type"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ],
)
def test_chat_refusals(tok, body, param):
    error = _refused(_chat, tok, **body)
    assert error.status == 400 and error.param == param


def test_chat_without_template_is_400():
    gpt2 = HFTokenizer.from_path(FIXTURES / "hf" / "gpt-2")
    error = _refused(_chat, gpt2, messages=[{"role": "user", "content": "x"}])
    assert error.status == 400 and error.param == "messages" and "no chat template" in error.message


def test_error_json_is_openai_shaped():
    body = json.loads(error_json(RequestError("bad thing", "stop", code="c")))
    assert body == {"error": {"message": "bad thing", "type": "invalid_request_error", "param": "stop", "code": "c"}}


@pytest.mark.parametrize(("raw", "fragment"), [(b"{bad", "not valid JSON"), (b"[1]", "must be a JSON object")])
def test_body_level_errors(raw, fragment):
    with pytest.raises(pydantic.ValidationError) as info:
        CompletionRequest.model_validate_json(raw)
    error = from_validation_error(info.value)
    assert fragment in error.message and error.param is None


# ---- SSE ---------------------------------------------------------------------------------------


def test_sse_framing_round_trip():
    payloads = [b'{"a": "x\\ny"}', b'{"b": 1}']
    wire = b"".join(sse.event(p) for p in payloads) + sse.DONE
    assert wire.endswith(b"data: [DONE]\n\n") and wire.count(b"\n\n") == 3
    lines = wire.decode().splitlines(keepends=True)
    assert list(sse.parse_events(iter(lines))) == [p.decode() for p in payloads] + ["[DONE]"]


# ---- responses from deltas ---------------------------------------------------------------------


class _FakeStream:
    def __init__(self, deltas: list[RequestDelta]) -> None:
        self._deltas = list(deltas)
        self.rid = 1

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestDelta:
        if not self._deltas:
            raise StopAsyncIteration
        return self._deltas.pop(0)


DELTAS = [
    RequestDelta("Hello"),
    RequestDelta(""),
    RequestDelta(", 世界 🫨"),
    RequestDelta("!", Finish("stop", "END"), 7),
]


def _ctx(kind: str, include_usage: bool = True) -> ResponseContext:
    return ResponseContext(kind, "id-1", "m", 3, include_usage, 0.0)  # type: ignore[arg-type]


async def _events(kind: str, deltas: list[RequestDelta], include_usage: bool = True) -> list[dict | str]:
    out = []
    chunks = [chunk async for chunk in stream_events(_ctx(kind, include_usage), [_FakeStream(deltas)], None)]
    for chunk in chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
        for event in chunk.split(b"\n\n")[:-1]:
            assert event.startswith(b"data: ")
            payload = event[6:].decode()
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    # one write for the response's end: the last delta's chunk (if it has text), the finish (and
    # usage) event or the error, and [DONE]; every chunk before it written on its own as it came
    tail = chunks[-1].split(b"\n\n")[:-1]
    assert tail[-1] == b"data: [DONE]" and len(tail) >= 2
    if deltas[-1].text:
        assert msgspec.json.encode(deltas[-1].text) in tail[0] and b'"finish_reason":null' in tail[0]
    assert all(len(chunk.split(b"\n\n")) == 2 for chunk in chunks[1:-1])
    return out


def test_streamed_completion_chunks():
    events = asyncio.run(_events("completion", DELTAS))
    assert events[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in events[:-1] if e["choices"]]
    assert "".join(texts) == "Hello, 世界 🫨!" and "" not in texts[:-1]  # no empty text chunks
    final = events[-3]["choices"][0]
    assert final["finish_reason"] == "stop" and final["stop_reason"] == "END"
    assert events[-2]["choices"] == [] and events[-2]["usage"] == {
        "prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10
    }
    assert all(e["object"] == "text_completion" and e["id"] == "id-1" for e in events[:-1])


def test_streamed_chat_chunks():
    events = asyncio.run(_events("chat", DELTAS, include_usage=False))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [e["choices"][0]["delta"].get("content") for e in events[1:-1]]
    assert "".join(c for c in contents if c) == "Hello, 世界 🫨!"
    assert events[-2]["choices"][0] == {
        "index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END", "logprobs": None
    }
    assert all("usage" not in e for e in events[:-1])
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])


def test_non_streamed_body_matches_stream():
    body = msgspec.json.decode(asyncio.run(collect_body(_ctx("chat"), [_FakeStream(DELTAS)], None)))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"content": "Hello, 世界 🫨!", "role": "assistant"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 7
    completion = msgspec.json.decode(asyncio.run(collect_body(_ctx("completion"), [_FakeStream(DELTAS)], None)))
    assert completion["choices"][0]["text"] == "Hello, 世界 🫨!"


def test_error_finish():
    failing = [RequestDelta("par"), RequestDelta("", Finish("error", None, "token id 999999 is outside"), 1)]
    events = asyncio.run(_events("completion", failing))
    assert events[-2] == {
        "error": {"message": "token id 999999 is outside", "type": "server_error", "param": None, "code": None}
    }
    with pytest.raises(RequestError) as info:
        asyncio.run(collect_body(_ctx("completion"), [_FakeStream(failing)], None))
    assert info.value.status == 500 and "999999" in info.value.message


# ---- batched latency histograms ----------------------------------------------------------------


@pytest.mark.parametrize("compiled", [True, False])
def test_batched_histogram_matches_direct_observation(compiled):
    from prometheus_client import Histogram

    from detok.streaming.latency import BatchedHistogram

    buckets = (0.001, 0.01, 0.1, 1.0)
    direct = Histogram("direct_seconds", "d", buckets=buckets, registry=None)
    batched_metric = Histogram("batched_seconds", "b", buckets=buckets, registry=None)
    batched = BatchedHistogram(batched_metric, compiled=compiled)
    if compiled:
        pytest.importorskip("detok._native._latency", reason="built without its C extensions")
        assert batched.buckets is not None
    values = [0.0005, 0.001, 0.001001, 0.05, 0.1, 0.7, 3.0, 0.0, 0.01]
    for v in values:
        direct.observe(v)
        batched.observe(v)

    def samples(metric) -> dict:
        return {(s.name.split("_seconds")[1], s.labels.get("le")): s.value for s in next(iter(metric.collect())).samples
                if not s.name.endswith("_created")}

    assert samples(batched_metric)[("_count", None)] == 0  # nothing reaches prometheus before a flush
    batched.flush()
    assert samples(batched_metric) == samples(direct)
    batched.flush()  # a second flush adds nothing
    assert samples(batched_metric) == samples(direct)


@settings(max_examples=300, deadline=None)
@given(bounds=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=12, unique=True),
       values=st.lists(st.one_of(st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 1.0, 0.5])), max_size=40))
def test_compiled_buckets_count_as_bisect_left_does(bounds, values):
    import bisect
    import math

    _latency = pytest.importorskip("detok._native._latency", reason="built without its C extensions")
    bounds = [*sorted(bounds), math.inf]
    values = [*values, *bounds[:-1]]  # (each bound itself: its own bucket)
    acc = _latency.Buckets(bounds)
    want = [0] * len(bounds)
    for v in values:
        acc.observe(v)
        want[min(bisect.bisect_left(bounds, v), len(bounds) - 1)] += 1
    counts, total = acc.take()
    assert counts == want
    running = 0.0
    for v in values:
        running += v  # (as the Python form adds them)
    assert total == running or (math.isnan(total) and math.isnan(running))
    assert acc.take() == ([0] * len(bounds), 0.0)  # (taken: reset)


def test_compiled_request_timer_ticks_ttft_then_itl_on_perf_counters_clock():
    import time

    from detok.streaming.latency import LatencyRecorder, RequestTimer
    from detok.metrics import frontend_metrics

    pytest.importorskip("detok._native._latency", reason="built without its C extensions")
    recorder = LatencyRecorder(frontend_metrics())
    recorder.flush()
    start = time.perf_counter()
    timer = RequestTimer(recorder, start)
    assert type(timer.text).__name__ == "builtin_function_or_method"  # (the compiled clock's)
    for _ in range(5):
        timer.text()
        time.sleep(0.002)
    elapsed = time.perf_counter() - start
    ttft, itl = recorder.ttft.buckets.take(), recorder.itl.buckets.take()
    assert sum(ttft[0]) == 1 and sum(itl[0]) == 4
    assert 0 <= ttft[1] < 0.002 and 0.008 <= itl[1] <= elapsed  # (the clocks agree: perf_counter's)
    python = RequestTimer(None, start)  # (no recorder: the Python form, a no-op)
    python.text()


def test_compiled_latency_types_refuse_bad_arguments():
    _latency = pytest.importorskip("detok._native._latency", reason="built without its C extensions")
    for bad, error in (([], ValueError), ([1.0, 1.0], ValueError), ([2.0, 1.0], ValueError), (["x"], TypeError),
                       (3, TypeError), ([0.0] * 5000, ValueError)):
        with pytest.raises(error):
            _latency.Buckets(bad)
    acc = _latency.Buckets([1.0])
    with pytest.raises(TypeError):
        acc.observe("x")
    with pytest.raises(TypeError):
        _latency.TokenClock(acc, object(), 0.0)
    with pytest.raises(TypeError):
        _latency.TokenClock(acc, acc, "now")
    clock = _latency.TokenClock(acc, acc, 0.0)
    assert clock.last is None
    clock.text()
    assert clock.last is not None


# ---- error paths, content format, tool-call arguments, limits ------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"stream": "yes"}, "stream", "valid boolean"),  # a field named like the union member `str`
        ({"stream_options": {"include_usage": "x"}}, "stream_options.include_usage", "valid boolean"),
        ({"stop": 5}, "stop", "expected a string or an array"),
        ({"logit_bias": {"5": "x"}}, "logit_bias.5", "valid number"),
    ],
)
def test_error_param_is_the_json_path(tok, body, param, fragment):
    error = _refused(_completion, tok, **{"prompt": "hi", **body})
    assert error.param == param and error.message.startswith(f"{param}: ") and fragment in error.message


def test_chat_error_paths_through_unions_and_lists(tok):
    error = _refused(_chat, tok, messages=[{"role": "user", "content": 5}])
    assert error.param == "messages.0.content" and "expected a string or an array" in error.message
    error = _refused(_chat, tok, messages=[{"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}])
    assert error.param == "messages.0.tool_calls.0.function.name"
    error = _refused(_chat, tok, messages=[{"role": "user", "content": "x"}], tool_choice="sometimes")
    assert error.param == "tool_choice" and "'none'" in error.message


def test_nulls_are_defaults(tok):
    nulls = {k: None for k in ("n", "stream", "min_tokens", "ignore_eos", "echo", "seed", "stop", "skip_special_tokens",
                               "include_stop_str_in_output", "max_tokens", "logprobs", "model", "temperature")}
    assert _completion(tok, prompt="x", **nulls) == _completion(tok, prompt="x")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{% for m in messages %}{{ m['content'] }}{% endfor %}", "string"),
        ("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}", "openai"),
        ("{% for m in messages %}{% for p in m.content | selectattr('type') %}{% endfor %}{% endfor %}", "openai"),
        ("{% set ms = messages[1:] %}{% for m in ms %}{% for p in m.content %}{% endfor %}{% endfor %}", "openai"),
        ("{% for m in messages %}{% for t in m.tool_calls %}{% endfor %}{% endfor %}", "string"),
        ("{% for p in content %}{% endfor %}", "string"),
        ("{% for m in messages", "string"),  # does not parse: the default
    ],
)
def test_template_content_format_detection(template, expected):
    from detok.tokenizer.chat import template_content_format

    assert template_content_format(template) == expected


def test_tool_call_arguments_print_as_sent_and_act_as_a_mapping():
    from detok.tokenizer.chat import ToolCallArguments, compile_chat_template

    args = ToolCallArguments({"b": 1, "a": [2]}, '{ "b" : 1, "a": [2] }')
    out = compile_chat_template("{{ x }}|{{ x | tojson }}|{% for k, v in x.items() %}{{ k }}{% endfor %}|"
                                "{{ x is mapping }}|{{ x['a'][0] }}").render(x=args)
    assert out == '{ "b" : 1, "a": [2] }|{"b": 1, "a": [2]}|ba|True|2'


def test_stop_strings_total_bytes_bound(tok):
    from detok.api.limits import MAX_STOP_TOTAL_BYTES

    at_limit = ["é" * 512] * (MAX_STOP_TOTAL_BYTES // 1024)  # 1024 bytes each
    assert len(_completion(tok, prompt="x", stop=at_limit).params.stop) == len(at_limit)
    error = _refused(_completion, tok, prompt="x", stop=[*at_limit, "a"])
    assert error.param == "stop" and "bytes" in error.message


def test_choice_seeds_are_distinct_within_int64(tok):
    assert _completion(tok, prompt="x", n=3, seed=2**63 - 2).choice_seeds() == [2**63 - 2, 2**63 - 1, -(2**63)]
    assert _completion(tok, prompt="x", n=2).choice_seeds() == [0, 1]
