"""Units of the typed edge (reasoning, content, tool calls): field chunks byte-equal to a Struct's
encoding, typed deltas shaped into chunks and bodies (streamed == non-streamed, include_reasoning,
parallel_tool_calls), where the output starts (prompt, chat_template_kwargs), and the stub's echo
workload and seeded per-step token counts."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.streaming.chunks import ChunkRenderer
from detok.api.openai_types import ChatChunkChoice
from detok.api.typed_requests import starts_in_reasoning
from detok.api.typed_responses import TypedChoice
from detok.parsing.types import ToolCallDelta
from detok.receiver.receiver import RequestDelta
from detok.wire.params import Finish

_texts = st.text(st.characters(codec="utf-8"), max_size=20)


class _Chunk(msgspec.Struct, tag_field="object", tag="chat.completion.chunk"):
    id: str
    created: int
    model: str
    choices: list[Any]


@settings(max_examples=100, deadline=None)
@given(text=_texts, key=st.sampled_from(["reasoning", "reasoning_content"]), index=st.integers(0, 2))
def test_field_chunks_equal_struct_encoding(text: str, key: str, index: int) -> None:
    render = ChunkRenderer("chat", "id", 1, "m", choices=3)
    want = _Chunk("id", 1, "m", [ChatChunkChoice(index, {key: text})])  # type: ignore[arg-type]
    assert render.fields(index, {key: text}) == b"data: " + msgspec.json.encode(want) + b"\n\n"


def _deltas() -> list[RequestDelta]:
    return [
        RequestDelta("", reasoning="think "),
        RequestDelta("hi", reasoning="more"),
        RequestDelta("", tool_calls=(ToolCallDelta(0, "call_a", "f", ""), ToolCallDelta(0, None, None, '{"x"'))),
        RequestDelta(" there", tool_calls=(ToolCallDelta(0, None, None, ": 1}"), ToolCallDelta(1, "call_b", "g", ""))),
        RequestDelta("", Finish("stop"), 9, calls=2),
    ]


@pytest.mark.parametrize(("include", "parallel"), [(True, True), (False, True), (True, False)])
def test_streamed_chunks_join_to_the_body(include: bool, parallel: bool) -> None:
    render = ChunkRenderer("chat", "id", 1, "m")
    streamed, body = TypedChoice("reasoning", include, parallel, True, True), TypedChoice("reasoning", include, parallel, True, True)
    reasoning, content, calls = "", "", {}
    for d in _deltas():
        body.add(d)
        chunks = streamed.chunks(render, 0, d, None)
        for raw in chunks:
            delta = json.loads(raw[6:-2])["choices"][0]["delta"]
            assert len(delta) == 1, "reasoning, content and tool calls go in separate chunks"
            reasoning += delta.get("reasoning", "")
            content += delta.get("content", "")
            for tc in delta.get("tool_calls", ()):
                if "id" in tc:
                    calls[tc["index"]] = [tc["id"], tc["function"]["name"], tc["function"]["arguments"]]
                else:
                    calls[tc["index"]][2] += tc["function"]["arguments"]
    message = body.message("".join(d.text for d in _deltas()))
    assert message.content == content == "hi there"
    assert (message.reasoning if include else None) == (reasoning if include else None)
    assert (reasoning == "think more") is include
    want = [[c.id, c.function.name, c.function.arguments] for c in message.tool_calls]
    assert want == [calls[i] for i in sorted(calls)]
    assert want == ([["call_a", "f", '{"x": 1}'], ["call_b", "g", "{}"]] if parallel else [["call_a", "f", '{"x": 1}']])
    assert body.num_calls(2) == (2 if parallel else 1)


def test_empty_content_is_null_and_unparsed_fields_are_absent() -> None:
    body = TypedChoice("reasoning_content", True, True, False, True)
    body.add(RequestDelta("", reasoning="r"))
    encoded = json.loads(msgspec.json.encode(body.message("")))
    assert encoded == {"content": None, "role": "assistant", "reasoning_content": "r"}


@pytest.mark.parametrize(("prompt", "kwargs", "want"), [
    ("<|im_start|>assistant\n<think>\n", {}, True),
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", {"enable_thinking": True}, False),
    ("<|im_start|>assistant\n", {"enable_thinking": False}, False),
    ("<|im_start|>assistant\n", {"thinking": True}, True),
    ("<|im_start|>assistant\n", {}, None),
])
def test_starts_in_reasoning(prompt: str, kwargs: dict, want: bool | None) -> None:
    assert starts_in_reasoning("qwen3", prompt, kwargs) is want


def test_echo_workload_and_seeded_step_counts() -> None:
    from detok.tokenizer.default import default_tokenizer_dir
    from detok.tokenizer.factory import load_tokenizer
    from detok.wire.params import DecodeParams
    from detok.wire.to_scheduler import GenerateRequest
    from scheduler_stub.generation import RequestGeneration
    from scheduler_stub.stub import StepPolicy
    from scheduler_stub.workload import END, make_workload

    tok = load_tokenizer(str(default_tokenizer_dir()))
    echo = make_workload("echo", tok)
    said = "Hi <|im_end|> <tool_call>{\"a\": 1}</tool_call> 北京"
    prompt = tok.encode(tok.apply_chat_template([{"role": "system", "content": "s"}, {"role": "user", "content": "x"},
                                                 {"role": "assistant", "content": "y"},
                                                 {"role": "user", "content": said}]))
    ids: list[int] = []
    stream = echo.tokens(prompt, 0)
    while (i := next(stream)) != END:
        ids.append(i)
    assert tok.decode(ids, skip_special_tokens=False) == said
    assert tok.token_to_id("<|im_end|>") in ids  # special tokens recognised in the text
    completion = tok.encode("just a prompt")
    stream = echo.tokens(completion, 0)
    assert [next(stream) for _ in completion] == completion and next(stream) == END
    with pytest.raises(ValueError):
        StepPolicy(0.0, 1, 4, 2)
    req = GenerateRequest(1, prompt, DecodeParams(), 100, "x", seed=3)
    counts = [RequestGeneration(req, echo, frozenset()).draw_count(1, 8) for _ in range(2)]
    gen = RequestGeneration(req, echo, frozenset())
    seq = [gen.draw_count(1, 8) for _ in range(50)]
    again = RequestGeneration(req, echo, frozenset())
    assert seq == [again.draw_count(1, 8) for _ in range(50)] and set(seq) > {1} and max(seq) <= 8
    assert counts[0] == counts[1]


def test_slim_schemas_parse_like_whole_ones() -> None:
    """What travels to the worker is the part of each schema the families read: qwen3_coder's typed
    values and glm45's string check give the same calls with it as with the whole schema."""
    from detok.api.typed_requests import slim_parameters
    from detok.parsing.output import OutputParser
    from detok.parsing.types import OutputParsing, Piece, ToolSpec

    schema = {"type": "object", "description": "x" * 500, "properties": {
        "n": {"type": "integer", "description": "a count"}, "f": {"anyOf": [{"type": "null"}, {"type": "number"}]},
        "s": {"type": "string", "enum": ["a", "b"]}, "o": {"type": "object", "properties": {"deep": {"type": "x"}}},
        "u": {"description": "untyped"}, "b": True, "z": None}}
    slim = slim_parameters(schema)
    assert slim is not None and "description" not in json.dumps(slim)
    texts = {
        "qwen3_coder": "<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=f>\nnull\n</parameter>\n"
                       "<parameter=s>\nb\n</parameter>\n<parameter=o>\n{\"k\": 1}\n</parameter>\n<parameter=u>\n7\n"
                       "</parameter>\n<parameter=b>\n1\n</parameter>\n</function>\n</tool_call>",
        "glm45": "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>42</arg_value>\n<arg_key>s</arg_key>\n"
                 "<arg_value>7</arg_value>\n</tool_call>",
    }
    for family, text in texts.items():
        results = []
        for params in (schema, slim):
            parser = OutputParser(OutputParsing(None, family, (ToolSpec("f", params),)), lambda _t: None)
            out = parser.feed(Piece(text))
            end = parser.finish()
            results.append((out.content + end.content, [(d.index, d.name, d.arguments) for d in out.tool_calls + end.tool_calls]))
        assert results[0] == results[1] and results[0][1], family
