"""gpt-oss calls vLLM makes and detok left out.

gpt-oss writes function calls on the `analysis` channel too (`<|channel|>analysis to=functions.f`;
the Harmony docs allow it, and gpt-oss-120b does it for a large share of its calls). vLLM makes them
calls: its `openai` tool parser takes any message with a `functions.` recipient (tool_parsers/
openai_tool_parser.py: `if msg.recipient and msg.recipient.startswith("functions.")`, before any
channel test), and its streamed Harmony deltas take `(commentary or analysis) and recipient
functions.*` as a call before `analysis` as reasoning (chat_completion/stream_harmony.py, vLLM #28139).

detok's `openai` tool parser alone made the call, but with `--reasoning-parser openai_gptoss` as well
(gpt-oss's usual configuration) the reasoning parser took the channel first: the arguments became
reasoning and the call was lost (no tool_calls, finish_reason "stop")."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest

from detok.parsing.output import OutputParser
from detok.parsing.types import OutputParsing, Piece, ToolSpec
from detok.tokenizer.base import Tokenizer
from tests.helpers.parsing_pieces import regroup, run_pieces, single_token, token_pieces
from tests.parsing import vocabularies as voc
from tests.parsing.test_harmony import CONFIGS, assemble, parse, run

TOKYO = '{"location": "Tokyo"}'
OUTPUT = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    "<|start|>assistant<|channel|>analysis to=functions.get_weather <|constrain|>json<|message|>" + TOKYO + "<|call|>"
)
# the recipient after the role, the channel analysis (as vLLM's renderer writes earlier calls)
OUTPUT_ROLE = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    "<|start|>assistant to=functions.get_weather<|channel|>analysis json<|message|>" + TOKYO + "<|call|>"
)
# an analysis call, then a final answer
OUTPUT_THEN_FINAL = OUTPUT + "<|start|>assistant<|channel|>final<|message|>Checking.<|return|>"

CUTS: dict[str, Callable[..., list[Piece]]] = {
    "per_token": token_pieces,
    "per_run": run_pieces,
    "regrouped": lambda t, i, m: regroup(token_pieces(t, i, m), random.Random(5), 0.5),
}


@pytest.mark.parametrize("output,content", [(OUTPUT, ""), (OUTPUT_ROLE, ""), (OUTPUT_THEN_FINAL, "Checking.")],
                         ids=["channel_recipient", "role_recipient", "then_final"])
@pytest.mark.parametrize("vocab", [voc.harmony, voc.gpt2], ids=["harmony_tokens", "gpt2_text"])
@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("config", ["both", "tools"])
def test_analysis_channel_call_is_a_call(output: str, content: str, vocab: Callable[[], Tokenizer], cut: str,
                                         config: str) -> None:
    reasoning, got_content, deltas = run(output, vocab(), config, CUTS[cut])
    calls = assemble(deltas)
    assert [n for n, _ in calls] == ["get_weather"]
    assert json.loads(calls[0][1]) == json.loads(TOKYO)
    assert got_content == content
    # the arguments are the call's, not reasoning (vLLM's streamed deltas)
    assert reasoning == ("Need the weather." if config == "both" else "")


@pytest.mark.parametrize("vocab", [voc.harmony, voc.gpt2], ids=["harmony_tokens", "gpt2_text"])
@pytest.mark.parametrize("cut", list(CUTS))
def test_a_function_call_without_a_tool_parser_is_left_out_on_any_channel(vocab: Callable[[], Tokenizer],
                                                                          cut: str) -> None:
    """Current vLLM (HarmonyParser: a function recipient makes a TOOL segment before the channel is
    looked at, and with no tool parser it is dropped): the analysis call's arguments are neither
    reasoning nor content; the analysis text before it stays reasoning."""
    reasoning, content, deltas = run(OUTPUT_THEN_FINAL, vocab(), "reasoning",
                                     CUTS[cut])
    assert (reasoning, content, assemble(deltas)) == ("Need the weather.", "Checking.", [])


def test_analysis_to_a_builtin_tool_stays_reasoning() -> None:
    """Only `functions.` recipients are calls of the request's tools: an analysis message to `python`
    stays reasoning (vLLM: analysis without a function recipient is reasoning)."""
    output = "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis to=python code<|message|>print(1)<|call|>"
    reasoning, content, deltas = run(output, voc.harmony(), "both", token_pieces)
    assert (reasoning, content, assemble(deltas)) == ("a\nprint(1)", "", [])


# ---- bare function names ------------------------------------------------------------------------
# gpt-oss sometimes drops the `functions.` prefix (`to=get_weather`), in long contexts most. vLLM
# (#42454, harmony_utils.is_function_recipient, used by its `openai` tool parser and streamed deltas)
# makes such a message a call; detok left it out (neither call nor content: finish_reason "stop").
# detok takes a bare name when it is one of the request's tools (vLLM's Chat path also takes unknown
# bare names, its fallback); never a built-in tool (`python`, `browser.*`, `container.*`).
WEATHER = (ToolSpec("get_weather", {"type": "object", "properties": {"location": {"type": "string"}}}),
           ToolSpec("python"))
BARE = ("<|channel|>analysis<|message|>Need the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=get_weather <|constrain|>json<|message|>" + TOKYO + "<|call|>")


def _run_with_tools(output: str, vocab: Callable[[], Tokenizer], config: str, cut: str,
                    tools: tuple[ToolSpec, ...] = WEATHER) -> tuple[str, str, list[tuple[str, str]]]:
    tok = vocab()
    rp, tp = CONFIGS[config]
    op = OutputParser(OutputParsing(reasoning_parser=rp, tool_parser=tp, tools=tools, call_id_seed="s"),
                      single_token(tok))
    reasoning, content, deltas = parse(op, CUTS[cut](tok, tok.encode(output), op.marker_ids))
    return reasoning, content, assemble(deltas)


@pytest.mark.parametrize("output", [BARE, BARE.replace("commentary to=get_weather ", "analysis to=get_weather "),
                                    BARE.replace("<|channel|>commentary to=get_weather ", " to=get_weather<|channel|>commentary ")],
                         ids=["commentary", "analysis", "role_recipient"])
@pytest.mark.parametrize("vocab", [voc.harmony, voc.gpt2], ids=["harmony_tokens", "gpt2_text"])
@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("config", ["both", "tools"])
def test_bare_name_of_a_request_tool_is_a_call(output: str, vocab: Callable[[], Tokenizer], cut: str, config: str) -> None:
    reasoning, content, calls = _run_with_tools(output, vocab, config, cut)
    assert [n for n, _ in calls] == ["get_weather"] and json.loads(calls[0][1]) == json.loads(TOKYO)
    assert content == "" and reasoning == ("Need the weather." if config == "both" else "")


@pytest.mark.parametrize("recipient", ["python", "browser.search", "container.exec", "lookup", "assistant"])
@pytest.mark.parametrize("config", ["both", "tools"])
def test_builtin_or_unknown_bare_recipient_is_no_call(recipient: str, config: str) -> None:
    """A built-in tool (even one a request names) or a name that is none of the request's tools."""
    output = BARE.replace("to=get_weather", f"to={recipient}")
    reasoning, content, calls = _run_with_tools(output, voc.harmony, config, "per_token")
    assert (content, calls) == ("", [])
