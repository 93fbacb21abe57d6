"""`skip_special_tokens` and the markers a reasoning family passes on as text.

The worker cuts marker ids out and feeds them to the parser as marker pieces even where the decoder
skips their text (detok.stream.typed_stream), so the parser still sees them, as vLLM's parsers see
the ids. But a marker the reasoning family does not drop - Qwen3's `<tool_call>` (an implicit end
kept for the tool parser, or a mention left in reasoning), a tool family's marker inside reasoning -
came back as the marker's text although the decoder had skipped it: with Qwen3.6's vocabulary (every
added token special in detok's preset) and the default `skip_special_tokens`, a `--reasoning-parser
qwen3` request without tools got `b<tool_call>cd` for `b<tool_call>c</tool_call>d` (the one marker
resurrected, its partner skipped), where the plain path gives `bcd`. The text a marker passes on is
the text the decoder gave for it: its own with `skip_special_tokens=False`, none when skipped.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import pytest

from detok.parsing.types import OutputParsing, ToolSpec
from detok.wire.params import DecodeParams
from detok.tokenizer.base import Tokenizer
from detok.wire.to_workers import EndRequest
from detok.worker.core import WorkerCore
from tests.helpers.typed_helpers import assemble, run_request
from tests.parsing import vocabularies as voc

# (id, vocabulary, family, output, (reasoning, content) with skip_special_tokens False, then True)
CASES: list[tuple[str, Callable[[], Tokenizer], str, str, tuple[str, str], tuple[str, str]]] = [
    ("qwen3_call_in_content", voc.qwen, "qwen3", "<think>a</think>b<tool_call>c</tool_call>d",
     ("a", "b<tool_call>c</tool_call>d"), ("a", "bcd")),
    ("qwen3_mention_in_reasoning", voc.qwen, "qwen3", "a<tool_call> x</tool_call></think>b",
     ("a<tool_call> x</tool_call>", "b"), ("a x", "b")),
    ("qwen3_json_call_ends_reasoning", voc.qwen, "qwen3", "a<tool_call>{}</tool_call></think>b",
     ("a", "<tool_call>{}</tool_call>b"), ("a", "{}b")),
    ("qwen3_implicit_end", voc.qwen, "qwen3", "a<tool_call>\n<function=f>x</tool_call>",
     ("a", "<tool_call>\n<function=f>x</tool_call>"), ("a", "\n<function=f>x")),
    ("qwen3_unconfirmed_at_length", voc.qwen, "qwen3", "a<tool_call>  ",
     ("a<tool_call>  ", ""), ("a  ", "")),
    ("kimi_section_ends_reasoning", voc.qwen_kimi, "kimi_k2", "a<|tool_calls_section_begin|>x",
     ("a", "<|tool_calls_section_begin|>x"), ("a", "x")),
    ("glm45_call_ends_reasoning", voc.qwen, "glm45", "<think>a<tool_call>x</tool_call>",
     ("a", "<tool_call>x</tool_call>"), ("a", "x")),
]


_RIDS = itertools.count(1)


@functools.cache
def _core(tok: Tokenizer) -> WorkerCore:
    """A worker per vocabulary (costly to build), each request a new rid that ends."""
    return WorkerCore(tok)


def _typed(tok: Tokenizer, family: str, tool: str | None, text: str, skip: bool, groups: list[int]):  # type: ignore[no-untyped-def]
    core = _core(tok)
    ids = tok.encode(text)
    tools = (ToolSpec("f", {"type": "object", "properties": {"x": {"type": "string"}}}),) if tool else ()
    parsing = OutputParsing(family, tool, tools)
    rid, other = next(_RIDS), next(_RIDS)
    batches = run_request(core, rid, ids, groups or [len(ids)], parsing, DecodeParams(skip_special_tokens=skip),
                          EndRequest(rid, "length"))
    plain = assemble(run_request(core, other, ids, [len(ids)], None, DecodeParams(skip_special_tokens=skip),
                                 EndRequest(other, "length")), other)
    return assemble(batches, rid), plain.text


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("skip", [False, True], ids=["keep_special", "skip_special"])
@pytest.mark.parametrize("grouping", ["one_per_step", "all_at_once"])
def test_marker_text_follows_skip_special_tokens(case: tuple, skip: bool, grouping: str) -> None:
    _, vocab, family, text, kept, skipped = case
    tok = vocab()
    n = len(tok.encode(text))
    got, plain = _typed(tok, family, None, text, skip, [1] * n if grouping == "one_per_step" else [n])
    assert (got.reasoning, got.content) == (skipped if skip else kept)
    if skip:  # the start and end markers are skipped by both: nothing else differs from the plain text
        assert got.reasoning + got.content == plain


@pytest.mark.parametrize("skip", [False, True], ids=["keep_special", "skip_special"])
def test_skipped_implicit_end_still_opens_the_call(skip: bool) -> None:
    """The tool parser after it still reads the skipped `<tool_call>` by id: the call is made."""
    tok = voc.qwen()
    text = "plan<tool_call>\n<function=f>\n<parameter=x>\nls\n</parameter>\n</function>\n</tool_call>"
    got, _ = _typed(tok, "qwen3", "qwen3_coder", text, skip, [1] * len(tok.encode(text)))
    assert got.reasoning == "plan" and got.content == ""
    assert [c[1:] for c in got.calls.values()] == [["f", '{"x": "ls"}']]
