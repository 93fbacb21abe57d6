"""gpt-oss Harmony: the peers' cases (tests/parsing/cases/openai.json and openai_gptoss.json, run as
written by test_family_tables.py) in the parser configurations their files do not name - reasoning
`openai_gptoss` and tools `openai` each alone and both - on cl100k with Harmony's special tokens added
(markers by id) and on GPT-2 (markers as plain text); any grouping gives the same result; hostile
headers and bodies."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.parsing.harmony import HEADER_LIMIT
from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing, Piece, ToolCallDelta
from detok.tokenizer.base import Tokenizer
from tests.helpers.parsing_pieces import regroup, run_pieces, single_token, token_pieces
from tests.parsing import peer_cases
from tests.parsing import vocabularies as voc

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "60"))
CONFIGS = {"both": ("openai_gptoss", "openai"), "reasoning": ("openai_gptoss", None), "tools": (None, "openai")}


def parse(op: OutputParser, pieces: list[Piece]) -> tuple[str, str, list[ToolCallDelta]]:
    reasoning, content, calls = [], [], []
    for p in pieces:
        d = op.feed(p)
        reasoning.append(d.reasoning)
        content.append(d.content)
        calls.extend(d.tool_calls)
    d = op.finish()
    return "".join(reasoning) + d.reasoning, "".join(content) + d.content, calls + d.tool_calls


def assemble(deltas: list[ToolCallDelta]) -> list[tuple[str, str]]:
    """(name, joined arguments) per index; the first delta of an index carries id and name, no later one."""
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if d.index not in calls:
            assert d.id and d.name is not None and d.index == len(calls), d
            calls[d.index] = [d.name, ""]
        else:
            assert d.id is None and d.name is None, d
        calls[d.index][1] += d.arguments
    return [(n, a) for n, a in calls.values()]


def same_args(got: str, want: str) -> bool:
    try:
        return json.loads(got) == json.loads(want)
    except ValueError:
        return got == want


def run(output: str, tok: Tokenizer, config: str, cut: Callable[..., list[Piece]]) -> tuple[str, str, list[ToolCallDelta]]:
    rp, tp = CONFIGS[config]
    op = OutputParser(OutputParsing(reasoning_parser=rp, tool_parser=tp, call_id_seed="seed"), single_token(tok))
    ids = tok.encode(output)
    assert tok.decode(ids, skip_special_tokens=False) == output
    return parse(op, cut(tok, ids, op.marker_ids))


# (case, vocabulary, a configuration its file does not name: that one runs in test_family_tables.py)
HARMONY = peer_cases.of("openai", "openai_gptoss")
OTHER_CONFIGS = [(case, vocab, config) for case in HARMONY for vocab in case.vocabularies for config in CONFIGS
                 if CONFIGS[config] != (case.reasoning_parser, case.tool_parser)]


@pytest.mark.parametrize(("case", "vocab", "config"), OTHER_CONFIGS, ids=[f"{c.name}-{v}-{k}" for c, v, k in OTHER_CONFIGS])
def test_harmony_case_in_every_configuration(case: peer_cases.PeerCase, vocab: str, config: str) -> None:
    """Without a tool parser the calls are left out of the content; without a reasoning parser the
    analysis is left out (vLLM). A case whose file names no tool parser has no call."""
    for cut in (token_pieces, run_pieces):
        reasoning, content, deltas = run(case.output, peer_cases.vocabulary(vocab), config, cut)
        calls = assemble(deltas)
        assert reasoning == ("" if config == "tools" else case.reasoning)
        assert content == case.content
        want = [] if config == "reasoning" else list(case.calls)
        assert [n for n, _ in calls] == [n for n, _ in want]
        for (_, got), (_, value) in zip(calls, want):
            assert same_args(got, value if isinstance(value, str) else json.dumps(value)), (got, value)


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_any_grouping_same_result(data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(HARMONY), label="case").output
    tok = data.draw(st.sampled_from([voc.harmony, voc.gpt2]), label="vocabulary")()
    config = data.draw(st.sampled_from(list(CONFIGS)), label="config")
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    whole = run(case, tok, config, run_pieces)
    want = (whole[0], whole[1], assemble(whole[2]))
    got = run(case, tok, config, lambda t, i, m: regroup(token_pieces(t, i, m), rng, 0.5))
    assert (got[0], got[1], assemble(got[2])) == want


def _op(config: str = "both", tokens: bool = True) -> tuple[OutputParser, Tokenizer]:
    tok = voc.harmony() if tokens else voc.gpt2()
    rp, tp = CONFIGS[config]
    return OutputParser(OutputParsing(reasoning_parser=rp, tool_parser=tp), single_token(tok)), tok


@pytest.mark.parametrize("tokens", [True, False], ids=["tokens", "text"])
def test_hostile_header_past_the_limit_is_content(tokens: bool) -> None:
    op, tok = _op(tokens=tokens)
    junk = "x" * (HEADER_LIMIT + 5)
    ids = tok.encode("<|channel|>" + junk + "<|message|>after")
    reasoning, content, calls = parse(op, token_pieces(tok, ids, op.marker_ids))
    assert (reasoning, calls) == ("", []) and content == junk + "after"


@pytest.mark.parametrize("tokens", [True, False], ids=["tokens", "text"])
def test_hostile_unclosed_and_nested(tokens: bool) -> None:
    op, tok = _op(tokens=tokens)
    text = (
        "<|channel|>analysis<|message|>a<|message|>b<|constrain|>c"  # markers that mean nothing in a body
        "<|channel|>final<|message|>answer"  # a new header closes the analysis implicitly
        "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"k\": [1,"  # cut mid-call
    )
    ids = tok.encode(text)
    reasoning, content, deltas = parse(op, token_pieces(tok, ids, op.marker_ids))
    assert reasoning == "abc" and content == "answer"
    assert assemble(deltas) == [("f", '{"k": [1,')]  # what came is kept, nothing invented


def test_hostile_huge_reasoning_streams_without_holding() -> None:
    op, tok = _op()
    op.feed(Piece("<|channel|>", "<|channel|>"))
    op.feed(Piece("analysis"))
    op.feed(Piece("<|message|>", "<|message|>"))
    total = 0
    for _ in range(1000):
        d = op.feed(Piece("reasoning < | > " * 256))
        assert d.reasoning and not d.content
        total += len(d.reasoning)
    assert total == 1000 * 16 * 256


def test_garbage_after_return_is_content() -> None:
    op, tok = _op()
    rng = random.Random(3)
    garbage = "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(3000)).replace("<|", "<")
    ids = tok.encode("<|channel|>final<|message|>ok<|return|>" + garbage)
    reasoning, content, calls = parse(op, token_pieces(tok, ids, op.marker_ids))
    assert (reasoning, content, calls) == ("", "ok" + garbage, [])


SOUP = [
    "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>",
    "<|", "|>", "<|chan", "nel|>", "assistant", "analysis", "final", "commentary", " to=functions.f",
    " to=python", " json", "{\"a\": 1}", "Hello", " ", "\n", "北京", "x",
]


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_any_harmony_soup_any_grouping(data: st.DataObject) -> None:
    """Random Harmony-ish text (markers, partial markers, headers, bodies in any order): one piece per
    token, all at once, and random regroupings give the same reasoning, content and calls."""
    tok = data.draw(st.sampled_from([voc.harmony, voc.gpt2]), label="vocabulary")()
    config = data.draw(st.sampled_from(list(CONFIGS)), label="config")
    case = text = "".join(data.draw(st.lists(st.sampled_from(SOUP), max_size=30), label="fragments"))
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    whole = run(case, tok, config, run_pieces)
    want = (whole[0], whole[1], assemble(whole[2]))
    for cut in (token_pieces, lambda t, i, m: regroup(token_pieces(t, i, m), rng, 0.5)):
        got = run(case, tok, config, cut)
        assert (got[0], got[1], assemble(got[2])) == want
    stripped = text
    for marker in SOUP[:7]:
        stripped = stripped.replace(marker, "")
    for marker in SOUP[:7]:
        if marker not in stripped:  # not spelled out of partial markers around a dropped one
            assert marker not in want[0] and marker not in want[1]


@pytest.mark.parametrize("tokens", [True, False], ids=["tokens", "text"])
def test_hostile_many_messages_in_one_piece(tokens: bool) -> None:
    """A replay's whole output at once: 20,000 messages (and as many calls, of which MAX_TOOL_CALLS
    are emitted) in one piece are each read once."""
    n = 20_000
    text = ("<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary to=functions.f"
            " <|constrain|>json<|message|>{}<|call|><|start|>assistant") * n
    op, tok = _op(tokens=tokens)
    pieces = run_pieces(tok, tok.encode(text), op.marker_ids) if tokens else [Piece(text)]
    reasoning, content, deltas = parse(op, pieces)
    from detok.parsing.tools.core import MAX_TOOL_CALLS

    assert reasoning == "\n".join(["r"] * n) and content == ""
    assert assemble(deltas) == [("f", "{}")] * MAX_TOOL_CALLS  # the bound on one response's calls
