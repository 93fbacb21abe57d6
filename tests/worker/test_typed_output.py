"""Typed output in the worker (reasoning, content, tool calls): reasoning, content and tool calls parsed
where the text is made, on a real Qwen3.6 vocabulary (`<think>`, `<tool_call>` are single tokens).
Test-only families (tests/helpers/toy_parsers.py) drive the plumbing; the real families have their own
tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detok.parsing.types import OutputParsing, ToolSpec
from detok.wire.params import DecodeParams, Finish
from detok.stream.table import _NOT_PLAIN
from detok.wire.to_workers import EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.toy_parsers import toy_parsers  # noqa: F401 - the fixture
from tests.helpers.typed_helpers import assemble, run_request
from tests.parsing import vocabularies

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "25"))
TOY = OutputParsing("toy_think", "toy_tools")
TEXT = ('<think>Let me think: 北京 🫨 is far.</think>Answer: <tool_call>{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}</tool_call> and <tool_call>{"name": "b", "arguments": {}}</tool_call> done.')


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return vocabularies.qwen()  # (the process's one Qwen3.6 tokenizer: one load and decode plan)


@pytest.fixture
def core(tok, toy_parsers):  # type: ignore[no-untyped-def]
    return WorkerCore(tok)


def _eos(tok) -> EndRequest:  # type: ignore[no-untyped-def]
    return EndRequest(1, "stop", min(tok.eos_token_ids))


def test_reasoning_content_and_calls(tok, core) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode(TEXT)
    got = assemble(run_request(core, 1, ids, [1] * len(ids), TOY, end=_eos(tok)), 1)
    assert got.reasoning == "Let me think: 北京 🫨 is far."
    assert got.content == "Answer:  and  done."
    assert [c[1:] for c in got.calls.values()] == [["get_weather", '{"city": "Paris"}'], ["b", "{}"]]
    assert got.calls[0][0] != got.calls[1][0] and str(got.calls[0][0]).startswith("call_")
    assert got.num_calls == 2 and got.finish == Finish("stop", min(tok.eos_token_ids))
    assert got.text == ""  # nothing in the plain text columns


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.integers(1, 9), max_size=60),
       stop=st.sampled_from([(), ("far",), ("Paris",), ("<",), ("<tool",), ("call>",), ("k>Ans",), ("</think>A",)]),
       include=st.booleans(), skip=st.booleans())
def test_any_grouping_gives_the_one_piece_result(tok, core, groups, stop, include, skip) -> None:  # type: ignore[no-untyped-def]
    """Random groupings of the same ids (and stop strings on the raw text, which with special
    tokens kept may cut into a marker's text) give the same typed result as all ids in one step,
    and as one id per step."""
    ids = tok.encode(TEXT)
    params = DecodeParams(stop=stop, include_stop_str_in_output=include, skip_special_tokens=skip)
    runs = []
    for rid, grouping in ((10, groups), (11, [len(ids)]), (12, [1] * len(ids))):
        runs.append(assemble(run_request(core, rid, ids, grouping, TOY, params, EndRequest(rid, "length")), rid))
    def key(r):  # type: ignore[no-untyped-def]  # call ids differ by rid (seeded from it)
        return r.reasoning, r.content, [c[1:] for c in r.calls.values()], r.finish, r.num_calls

    assert key(runs[0]) == key(runs[1]) == key(runs[2])
    assert not core.live


def test_text_equals_the_plain_path(tok, core) -> None:  # type: ignore[no-untyped-def]
    """A request with only reasoning parsing: reasoning + content is exactly the plain path's text
    (the markers are special tokens of this tiktoken preset, skipped by both)."""
    text = "<think>a 北京 b</think>c 🫨 d"
    ids = tok.encode(text)
    plain = assemble(run_request(core, 1, ids, [2] * 20, None, end=EndRequest(1, "length")), 1)
    typed = assemble(run_request(core, 2, ids, [3] * 20, OutputParsing("toy_think"), end=EndRequest(2, "length")), 2)
    assert typed.reasoning + typed.content == plain.text == "a 北京 bc 🫨 d"


def test_stop_string_applies_to_the_raw_text_first(tok, core) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode(TEXT)
    got = assemble(run_request(core, 1, ids, [1] * len(ids), TOY, DecodeParams(stop=("Answer",))), 1)
    assert got.finish == Finish("stop", "Answer") and got.content == "" and got.num_calls == 0
    assert got.reasoning == "Let me think: 北京 🫨 is far."
    assert not core.live


def test_length_stays_length_with_calls(tok, core) -> None:  # type: ignore[no-untyped-def]
    from detok.wire.to_frontends import openai_finish_reason

    ids = tok.encode(TEXT)
    got = assemble(run_request(core, 1, ids, [4] * 50, TOY, end=EndRequest(1, "length")), 1)
    assert got.num_calls == 2 and openai_finish_reason(got.finish, got.num_calls) == "length"  # type: ignore[arg-type]
    assert openai_finish_reason(Finish("stop"), 2) == "tool_calls" and openai_finish_reason(Finish("stop"), 0) == "stop"


def test_unfinished_call_is_flushed_not_dropped(tok, core) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode('x<tool_call>{"name": "a"')
    got = assemble(run_request(core, 1, ids, [1] * 20, TOY, end=EndRequest(1, "length")), 1)
    assert got.content == 'x<tool_call>{"name": "a"' and got.num_calls == 0


def test_replay_on_a_fresh_worker_is_deduplicated_exactly(tok, core, toy_parsers) -> None:  # type: ignore[no-untyped-def]
    """A new worker gets everything again from start 0: the receiver keeps one copy of each stream;
    call ids are the same (seeded from the rid)."""
    from detok.receiver.typed import TypedState

    ids = tok.encode(TEXT)
    half = len(ids) * 2 // 3
    state = TypedState()
    first = assemble(run_request(core, 5, ids[:half], [2] * 40, TOY), 5, state)
    again = assemble(run_request(WorkerCore(tok), 5, ids, [len(ids)], TOY, end=EndRequest(5, "length")), 5, state, first)
    whole = assemble(run_request(WorkerCore(tok), 5, ids, [1] * len(ids), TOY, end=EndRequest(5, "length")), 5)
    assert (again.reasoning, again.content, again.calls) == (whole.reasoning, whole.content, whole.calls)
    assert state.gaps == 0


def test_unknown_parser_and_limits_fail_that_request_only(tok, core) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode("hello world")
    bad = assemble(run_request(core, 1, ids, [1], OutputParsing("no_such_parser")), 1)
    assert bad.finish is not None and bad.finish.reason == "error" and "no_such_parser" in str(bad.finish.message)
    many = OutputParsing(None, "toy_tools", tuple(ToolSpec(f"t{i}") for i in range(10_000)))
    bad = assemble(run_request(core, 2, ids, [1], many), 2)
    assert bad.finish is not None and bad.finish.reason == "error" and "tools" in str(bad.finish.message)
    deep: dict = {}
    node = deep
    for _ in range(200):
        node["x"] = {}
        node = node["x"]
    bad = assemble(run_request(core, 3, ids, [1], OutputParsing(None, "toy_tools", (ToolSpec("f", deep),))), 3)
    assert bad.finish is not None and "nest" in str(bad.finish.message)
    good = assemble(run_request(core, 4, ids, [1] * 5, TOY, end=EndRequest(4, "length")), 4)
    assert good.content == "hello world" and good.finish == Finish("length")


def test_a_parser_that_raises_fails_its_request_only(tok, core) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode("<think>hello</think>world")
    bad = assemble(run_request(core, 1, ids, [1] * 9, OutputParsing("toy_boom")), 1)
    assert bad.finish is not None and bad.finish.reason == "error" and "boom" in str(bad.finish.message)
    assert 1 not in core.live
    ok = assemble(run_request(core, 2, ids, [1] * 9, OutputParsing("toy_think"), end=EndRequest(2, "length")), 2)
    assert (ok.reasoning, ok.content) == ("hello", "world")


def test_plain_requests_keep_the_compiled_path(tok, core) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode("plain text here")
    run_request(core, 1, ids, [1, 1], None)
    run_request(core, 2, ids, [1, 1], TOY)
    table = core.table
    assert table.columns.expect[table._slot_of[1]] != _NOT_PLAIN
    assert table.columns.expect[table._slot_of[2]] == _NOT_PLAIN


# ---- the real families (qwen3 reasoning, hermes tool calls) ----------------------------------------
QWEN = OutputParsing("qwen3", "hermes", (ToolSpec("get_weather", {"type": "object"}), ToolSpec("b")))
HERMES_TEXT = ('<think>Let me think: 北京 🫨 is far.</think>Answer: <tool_call>\n{"name": "get_weather", '
               '"arguments": {"city": "Paris", "days": [1, 2]}}\n</tool_call>\n<tool_call>\n{"name": "b", '
               '"arguments": {}}\n</tool_call>')


@pytest.mark.ci_examples(10)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.integers(1, 9), max_size=60),
       stop=st.sampled_from([(), ("far",), ("Paris",), ("<tool",), ("call>",), ("k>Ans",), ('"b"',)]),
       include=st.booleans(), skip=st.booleans())
def test_qwen3_hermes_any_grouping_gives_the_one_piece_result(tok, groups, stop, include, skip) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode(HERMES_TEXT)
    params = DecodeParams(stop=stop, include_stop_str_in_output=include, skip_special_tokens=skip)
    runs = [assemble(run_request(WorkerCore(tok), 3, ids, grouping, QWEN, params, EndRequest(3, "length")), 3)
            for grouping in (groups, [len(ids)], [1] * len(ids))]
    keys = [(r.reasoning, r.content, r.calls, r.finish, r.num_calls) for r in runs]
    assert keys[0] == keys[1] == keys[2]
    if not stop:
        assert runs[0].reasoning == "Let me think: 北京 🫨 is far." and runs[0].content == "Answer: "
        assert [c[1:] for c in runs[0].calls.values()] == [["get_weather", '{"city": "Paris", "days": [1, 2]}'],
                                                           ["b", "{}"]]


def test_numpy_path_gives_the_compiled_result(tok) -> None:  # type: ignore[no-untyped-def]
    ids = tok.encode(HERMES_TEXT + " tail")
    results = []
    for compiled in (True, False):
        core = WorkerCore(tok)
        core.table.compiled = compiled
        got = assemble(run_request(core, 9, ids, [1, 3, 2] * 30, QWEN, end=EndRequest(9, "length")), 9)
        results.append((got.reasoning, got.content, got.calls, got.finish, got.num_calls))
    assert results[0] == results[1] and results[0][4] == 2
