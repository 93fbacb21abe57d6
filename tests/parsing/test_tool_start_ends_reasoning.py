"""A tool-call start ends reasoning: with `qwen3` + `hermes` (Qwen3 hybrid and Qwen3-2507's
setup), an output without `<think>` that holds a `<tool_call>` JSON block gives its call back through the
worker's typed stream - finish `tool_calls`, for any grouping of ids and one id per step - and the
thinking switch (`enable_thinking` / `thinking`) decides where the output starts for every family."""

from __future__ import annotations

import functools
import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.api.typed_requests import starts_in_reasoning
from detok.parsing.registry import reasoning_parsers
from detok.parsing.types import OutputParsing, ToolSpec
from detok.wire.params import DecodeParams
from detok.wire.to_workers import EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.typed_helpers import assemble, run_request
from tests.parsing import vocabularies as voc

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "25"))
TOOLS = (ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}), ToolSpec("f"))
QWEN_HERMES = OutputParsing("qwen3", "hermes", TOOLS, call_id_seed="s")
NO_THINK = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>')
CALLS = [["get_weather", '{"city": "Paris"}'], ["f", "{}"]]


_RIDS = itertools.count(1)


@functools.cache
def _core() -> WorkerCore:
    """One worker for the module (costly to build), each request a new rid that ends."""
    return WorkerCore(voc.qwen())


def _run(ids: list[int], grouping: list[int], parsing: OutputParsing, params: DecodeParams = DecodeParams()):  # type: ignore[no-untyped-def]
    rid = next(_RIDS)
    end = EndRequest(rid, "stop", min(voc.qwen().eos_token_ids))
    return assemble(run_request(_core(), rid, ids, grouping, parsing, params, end), rid)


def test_call_without_think_comes_back_with_finish_tool_calls() -> None:
    ids = voc.qwen().encode(NO_THINK)
    got = _run(ids, [1] * len(ids), QWEN_HERMES)
    assert (got.reasoning, got.content) == ("", "")
    assert [c[1:] for c in got.calls.values()] == CALLS
    assert got.num_calls == 2  # the frontend's finish_reason "tool_calls"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.integers(1, 9), max_size=40),
       lead=st.sampled_from(["", "plan ", "Let me look: 北京 🫨\n\n"]),
       stop=st.sampled_from([(), ("Paris",), ("<tool",), ('"f"',)]),
       skip=st.booleans())
def test_any_grouping_gives_the_one_id_per_step_result(groups, lead, stop, skip) -> None:  # type: ignore[no-untyped-def]
    ids = voc.qwen().encode(lead + NO_THINK)
    params = DecodeParams(stop=stop, skip_special_tokens=skip)
    runs = [_run(ids, g, QWEN_HERMES, params) for g in (groups, [len(ids)], [1] * len(ids))]
    keys = [(r.reasoning, r.content, [c[1:] for c in r.calls.values()], r.finish, r.num_calls) for r in runs]
    assert keys[0] == keys[1] == keys[2]
    if not stop:
        assert runs[0].reasoning == lead and runs[0].content == ""
        assert [c[1:] for c in runs[0].calls.values()] == CALLS


def test_enable_thinking_false_reads_the_same_output_as_content() -> None:
    ids = voc.qwen().encode("hello " + NO_THINK)
    got = _run(ids, [2] * len(ids), OutputParsing("qwen3", "hermes", TOOLS, starts_in_reasoning=False))
    assert (got.reasoning, got.content) == ("", "hello ")
    assert [c[1:] for c in got.calls.values()] == CALLS


@pytest.mark.parametrize("family", sorted(reasoning_parsers()))
@pytest.mark.parametrize("key", ["enable_thinking", "thinking"])
def test_the_thinking_switch_is_honoured_for_every_family(family: str, key: str) -> None:
    """Either kwarg, on or off, decides the start of every family whose prompt does not decide it
    (Gemma 4 writes its own `<|channel>`: the switch does not open it, as vLLM's gemma4)."""
    if not reasoning_parsers()[family].thinking_switch:
        assert starts_in_reasoning(family, "<|im_start|>assistant\n", {key: True}) is None
        return
    assert starts_in_reasoning(family, "<|im_start|>assistant\n", {key: True}) is True
    assert starts_in_reasoning(family, "<|im_start|>assistant\n", {key: False}) is False
    assert starts_in_reasoning(family, "<|im_start|>assistant\n", {}) is None  # the family's default


def test_a_prompt_ending_inside_gemma4s_channel_starts_in_reasoning() -> None:
    """vLLM's gemma4 adjust_initial_state_from_prompt: the template's `<|channel>thought\n` opens it."""
    assert starts_in_reasoning("gemma4", "<|turn>model\n<|channel>thought\n", {}) is True
    assert starts_in_reasoning("gemma4", "<|turn>model\n<|channel>thought\n<channel|>", {"enable_thinking": True}) is False
    assert starts_in_reasoning("gemma4", "<|turn>model\n", {"enable_thinking": True}) is None
