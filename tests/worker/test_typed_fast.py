"""Typed output on the worker's compiled path (detok.stream.typed_fast): a parsed request's ids that
cannot change its parser's state leave as text rows with a kind, and the assembled reasoning,
content and tool calls are exactly those of the path that feeds every id to the parser, for any
grouping of the ids, on real vocabularies (markers as tokens, and as text on GPT-2)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.types import OutputParsing, ToolSpec
from detok.stream.params import DecodeParams
from detok.wire.to_workers import DetokBatch, EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.typed_helpers import Typed, assemble, run_request
from tests.parsing import vocabularies

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "25"))
TOOLS = (ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}), ToolSpec("b"))
THINK = "<think>Let me think: 北京 🫨 is far, \"quoted\" and {braced} [x] <not a tag>.</think>"
CASES = {
    "qwen3+hermes": ("qwen", "qwen3", "hermes", THINK + 'Answer: <tool_call>\n{"name": "get_weather", "arguments": '
                     '{"city": "Paris 北京 is a long city name", "days": [1, 2]}}\n</tool_call>\n<tool_call>\n{"name": '
                     '"b", "arguments": {}}\n</tool_call>'),
    "qwen3+qwen3_coder": ("qwen", "qwen3", "qwen3_coder", THINK + "Sure.\n<tool_call>\n<function=get_weather>\n"
                          "<parameter=city>\nParis 北京\n</parameter>\n</function>\n</tool_call>"),
    "qwen3+llama3_json": ("qwen", "qwen3", "llama3_json", THINK + '{"name": "get_weather", "parameters": {"city": '
                          '"Paris, the capital"}}'),
    "deepseek_r1+deepseek_v31": ("deepseek", "deepseek_r1", "deepseek_v31", THINK + "Let me call.<｜tool▁calls▁begin｜>"
                                 "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris 北京 far away\"}"
                                 "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "kimi_k2": ("qwen_kimi", "kimi_k2", "kimi_k2", THINK + "Calling.<|tool_calls_section_begin|><|tool_call_begin|>"
                "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris and more words\"}<|tool_call_end|>"
                "<|tool_calls_section_end|>"),
    "mistral": ("mistral", "mistral", "mistral", "[THINK]Let me think about 北京 and words.[/THINK]Sure thing. "
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris with some words\"}"),
    "gpt2 markers as text": ("gpt2", "qwen3", "hermes", THINK + 'Answer: <tool_call>\n{"name": "get_weather", '
                             '"arguments": {"city": "Paris is a long name"}}\n</tool_call>'),
    "openai_gptoss+openai": ("harmony", "openai_gptoss", "openai",
                             "<|channel|>analysis<|message|>Let me think about 北京 and more.<|end|><|start|>assistant"
                             "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
                             "\"Paris and words\"}<|call|><|start|>assistant<|channel|>final<|message|>The answer is "
                             "sunny, with words.<|return|>"),
    "reasoning only": ("qwen", "qwen3", None, THINK + "The answer, with <b>tags</b> and {braces} 🫨."),
}


def _run(tok, case: str, groups: list[int], fast: bool, params: DecodeParams = DecodeParams()) -> tuple[Typed, int, int]:  # type: ignore[no-untyped-def]
    """(assembled output, rows with a kind, rows) of the case's ids sent in `groups`."""
    _, reasoning, tool, text = CASES[case]
    core = WorkerCore(tok)
    core.table.typed_fast = fast
    ids = tok.encode(text)
    parsing = OutputParsing(reasoning, tool, TOOLS if tool else ())
    batches = run_request(core, 7, ids, groups or [len(ids)], parsing, params, EndRequest(7, "length"))
    assert not core.live and core.table._typed.fast_slots == 0
    kinds = sum(sum(1 for k in b.kinds if k) for b in batches)
    rows = sum(len(b.rids) // 8 for b in batches)
    return assemble(batches, 7), kinds, rows


def _key(t: Typed) -> tuple[object, ...]:
    return t.reasoning, t.content, t.calls, t.finish, t.num_calls, t.text


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):  # type: ignore[no-untyped-def]
    return request.param


@pytest.fixture(scope="module")
def tok(case):  # type: ignore[no-untyped-def]
    return getattr(vocabularies, CASES[case][0])()


def test_one_id_per_step_is_mostly_on_the_compiled_path_and_exact(tok, case) -> None:  # type: ignore[no-untyped-def]
    n = len(tok.encode(CASES[case][3]))
    slow, _, _ = _run(tok, case, [1] * n, fast=False)
    fast, kinds, rows = _run(tok, case, [1] * n, fast=True)
    assert _key(fast) == _key(slow)
    assert slow.reasoning and not fast.text
    # most ids are inside reasoning, content or a string argument (measured: 45-85% per case)
    assert kinds / rows >= 0.35, (kinds, rows)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.integers(1, 6), max_size=80), skip=st.booleans())
def test_any_grouping_gives_the_slow_paths_result(tok, case, groups, skip) -> None:  # type: ignore[no-untyped-def]
    params = DecodeParams(skip_special_tokens=skip)
    want, _, _ = _run(tok, case, [], fast=False, params=params)
    got, _, _ = _run(tok, case, groups, fast=True, params=params)
    assert _key(got) == _key(want)


def test_stop_strings_keep_a_request_off_the_path(tok, case) -> None:  # type: ignore[no-untyped-def]
    n = len(tok.encode(CASES[case][3]))
    params = DecodeParams(stop=["never appears"])
    slow, _, _ = _run(tok, case, [1] * n, fast=False, params=params)
    fast, kinds, _ = _run(tok, case, [1] * n, fast=True, params=params)
    assert kinds == 0 and _key(fast) == _key(slow)


def test_an_abort_mid_reasoning_frees_the_slot(tok, case) -> None:  # type: ignore[no-untyped-def]
    from detok.parsing.types import OutputParsing as P
    from detok.wire.packing import pack_rids, pack_u32
    from detok.wire.to_workers import Registration
    from tests.helpers.typed_helpers import REPLY_TO

    _, reasoning, tool, text = CASES[case]
    core = WorkerCore(tok)
    ids = tok.encode(text)[:6]
    reg = Registration(9, REPLY_TO, [], DecodeParams(), parsing=P(reasoning, tool, TOOLS if tool else ()))
    core.handle_batch(DetokBatch(1, 0.0, [reg], b"", b"", b"", b"", []))
    for k, i in enumerate(ids):
        core.handle_batch(DetokBatch(2 + k, 0.0, [], pack_rids([9]), pack_u32([k]), b"", pack_u32([i]), []))
    assert core.table._typed.fast_slots == 1  # inside reasoning
    core.handle_batch(DetokBatch(99, 0.0, [], b"", b"", b"", b"", [EndRequest(9, "abort")]))
    assert not core.live and core.table._typed.fast_slots == 0
