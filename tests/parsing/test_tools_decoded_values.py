"""Values the parsers decode from the model's JSON (a hermes/llama3/mistral name, a serialized
string arguments, a typed qwen3_coder or glm45 value, a Kimi bare counter's arguments) are model
output like any other: decoding them must neither raise nor yield text that cannot be sent.

- A `\\ud800` escape decodes to a lone surrogate, which `json.dumps(ensure_ascii=False)` writes back
  raw: the worker's msgpack encoding of the step's batch then raises UnicodeEncodeError in
  `ServingLoop._send` (a worker's fatal error, every request of the worker lost). vLLM's
  `extract_tool_calls` catches every exception and gives such output as content.
- About a thousand nested `[` make `json.loads` raise RecursionError (and a name that is a number of
  more than 4300 digits, ValueError): the request ends with "output parsing failed". vLLM's
  non-streamed paths catch them (`except Exception`) and give the output as content.

Every case on real vocabularies, in every grouping of its tokens (`run_all_groupings`)."""

from __future__ import annotations

import json

import msgspec
import pytest

from detok.parsing.limits import MAX_ARGUMENT_DEPTH
from detok.parsing.tools import json_values
from detok.parsing.tools import Glm45ToolParser
from detok.parsing.tools import HermesToolParser
from detok.parsing.tools import KimiK2ToolParser
from detok.parsing.tools import MistralToolParser
from detok.parsing.tools import Qwen3CoderToolParser
from detok.parsing.types import OutputParsing, ToolSpec
from tests.helpers.tool_parsing import Result, run_all_groupings, tools_of
from tests.helpers.tool_pieces import added_marker_pieces, marker_ids, token_pieces

TOOLS = tools_of(("f", {"type": "object", "properties": {"a": {"type": "array"}, "o": {"type": "object"},
                                                         "s": {"type": "string"}}}), "g")
DEEP = "[" * 3000 + "]" * 3000


def sendable(result: Result) -> None:
    """Everything a parser gave can be encoded as the worker sends it (msgpack: UTF-8 strings)."""
    msgspec.msgpack.encode([result.content, [(c.id, c.name, c.arguments) for c in result.calls]])


def hermes(tok, text: str) -> Result:  # type: ignore[no-untyped-def]
    markers = marker_ids(HermesToolParser, tok)
    return run_all_groupings(HermesToolParser, token_pieces(tok, text, markers), tools=TOOLS,
                             token_markers=frozenset(markers.values()))


def qwen3_coder(tok, text: str) -> Result:  # type: ignore[no-untyped-def]
    markers = marker_ids(Qwen3CoderToolParser, tok)
    return run_all_groupings(Qwen3CoderToolParser, token_pieces(tok, text, markers), tools=TOOLS,
                             token_markers=frozenset(markers.values()))


def glm45(tok, text: str) -> Result:  # type: ignore[no-untyped-def]
    markers = list(Glm45ToolParser.markers)
    return run_all_groupings(Glm45ToolParser, added_marker_pieces(tok, text, markers), tools=TOOLS,
                             token_markers=frozenset(markers))


# ---- lone surrogates ---------------------------------------------------------------------------
def test_hermes_name_with_a_lone_surrogate_is_content(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = '<tool_call>{"name": "f\\ud800", "arguments": {}}</tool_call>'
    result = hermes(qwen3_tok, text)
    sendable(result)
    assert result.calls == [] and result.content == text


def test_hermes_serialized_arguments_with_a_lone_surrogate(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    # vLLM hermes decodes the string once: {"a": "\ud800"}; the same value, written so it can be sent
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": \\"x\\ud800\\"}"}</tool_call>'
    result = hermes(qwen3_tok, text)
    sendable(result)
    assert [(c.name, c.args()) for c in result.calls] == [("f", {"a": "x\ud800"})]


def test_mistral_array_name_with_a_lone_surrogate() -> None:
    from detok.tokenizer.factory import load_tokenizer
    from tests.helpers.tokenizers_available import mistral_tekken

    tok = load_tokenizer(str(mistral_tekken("240911")))
    markers = ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"]
    text = '[TOOL_CALLS][{"name": "\\udc00", "arguments": {}}, {"name": "g", "arguments": {"b": "\\ud83e"}}]'
    result = run_all_groupings(MistralToolParser, added_marker_pieces(tok, text, markers),
                               token_markers=frozenset(markers))
    sendable(result)
    assert [c.name for c in result.calls] == []


@pytest.mark.parametrize("value", ['{"k": "x\\udc00y"}', '["\\ud83e", {"\\ud800": 1}]'])
def test_qwen3_coder_typed_value_with_a_lone_surrogate(qwen3_tok, value: str) -> None:  # type: ignore[no-untyped-def]
    text = f"<tool_call>\n<function=f>\n<parameter=o>\n{value}\n</parameter>\n</function>\n</tool_call>"
    result = qwen3_coder(qwen3_tok, text)
    sendable(result)
    assert [(c.name, c.args()) for c in result.calls] == [("f", {"o": json.loads(value)})]


def test_glm45_value_with_a_lone_surrogate() -> None:
    from tests.parsing import vocabularies

    text = '<tool_call>f\n<arg_key>o</arg_key>\n<arg_value>{"k": "\\ud83e"}</arg_value>\n</tool_call>'
    result = glm45(vocabularies.qwen_glm(), text)
    sendable(result)
    assert [(c.name, c.args()) for c in result.calls] == [("f", {"o": {"k": "\ud83e"}})]


def test_a_worker_step_with_such_a_call_can_be_sent() -> None:
    """The worker's own path: the step's DeltaBatch goes out through the wire encoder
    (`ServingLoop._send`), which raised UnicodeEncodeError for the whole batch."""
    from detok.wire.codec import new_encoder
    from detok.wire.to_workers import EndRequest
    from detok.worker.core import WorkerCore
    from tests.helpers.typed_helpers import assemble, run_request
    from tests.parsing import vocabularies

    tok = vocabularies.qwen()
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": \\"\\ud83e\\"}"}</tool_call>'
    ids = tok.encode(text)
    batches = run_request(WorkerCore(tok), 7, ids, [1] * len(ids), OutputParsing(None, "hermes", (ToolSpec("f"),)),
                          end=EndRequest(7, "stop"))
    encoder = new_encoder()
    for batch in batches:
        encoder.encode(batch)
    assert json.loads(str(assemble(batches, 7).calls[0][2])) == {"a": "\ud83e"}


# ---- nesting and huge numbers ------------------------------------------------------------------
@pytest.mark.parametrize("name", [DEEP, "1" * 5000])
def test_hermes_name_nested_or_a_huge_number_is_content(qwen3_tok, name: str) -> None:  # type: ignore[no-untyped-def]
    text = f'<tool_call>{{"name": {name}, "arguments": {{}}}}</tool_call> after'
    result = hermes(qwen3_tok, text)
    assert result.calls == [] and result.content == text


def test_llama3_json_name_nested_deep_is_content() -> None:
    from detok.parsing.tools import Llama3JsonToolParser
    from detok.tokenizer.factory import load_tokenizer
    from tests.helpers.tokenizers_available import llama3_tokenizer_json

    tok = load_tokenizer(str(llama3_tokenizer_json()))
    text = f'x {{"name": {DEEP}, "parameters": {{}}}} y'
    result = run_all_groupings(Llama3JsonToolParser, token_pieces(tok, text, {}), tools=TOOLS)
    assert result.calls == [] and result.content == text


def test_hermes_serialized_arguments_nested_deep_stay_a_string(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = f'<tool_call>{{"name": "f", "arguments": "{DEEP}"}}</tool_call>'
    result = hermes(qwen3_tok, text)
    assert [(c.name, c.args()) for c in result.calls] == [("f", DEEP)]


def test_qwen3_coder_array_nested_deep_stays_a_string(qwen3_tok) -> None:  # type: ignore[no-untyped-def]
    text = f"<tool_call>\n<function=f>\n<parameter=a>\n{DEEP}\n</parameter>\n</function>\n</tool_call>"
    result = qwen3_coder(qwen3_tok, text)
    assert [(c.name, c.args()) for c in result.calls] == [("f", {"a": DEEP})]


def test_glm45_value_nested_deep_stays_a_string() -> None:
    from tests.parsing import vocabularies

    text = f"<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>{DEEP}</arg_value>\n</tool_call>"
    result = glm45(vocabularies.qwen_glm(), text)
    assert [(c.name, c.args()) for c in result.calls] == [("f", {"a": DEEP})]


def test_kimi_bare_counter_nested_deep_is_dropped() -> None:
    """Two tools: the bare counter's call is named by its arguments, which are no object here."""
    from tests.parsing import vocabularies

    markers = list(KimiK2ToolParser.markers)
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>0<|tool_call_argument_begin|>" + DEEP
            + "<|tool_call_end|><|tool_calls_section_end|>")
    result = run_all_groupings(KimiK2ToolParser, added_marker_pieces(vocabularies.qwen_kimi(), text, markers),
                               tools=TOOLS, token_markers=frozenset(markers))
    assert result.calls == []


# ---- the nesting bound is detok's own, the same on every interpreter ----------------------------
def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_DEPTH + 1])
def test_qwen3_coder_array_at_the_depth_bound(qwen3_tok, depth: int) -> None:  # type: ignore[no-untyped-def]
    """At `MAX_ARGUMENT_DEPTH` levels the array is decoded; one more and it stays the model's text
    (on 3.13 the JSON decoder itself would take thousands of levels, on 3.11 not a thousand)."""
    text = f"<tool_call>\n<function=f>\n<parameter=a>\n{nested(depth)}\n</parameter>\n</function>\n</tool_call>"
    [call] = qwen3_coder(qwen3_tok, text).calls
    value = call.args()["a"]
    if depth <= MAX_ARGUMENT_DEPTH:
        assert value == json.loads(nested(depth))
    else:
        assert value == nested(depth)


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_DEPTH + 1])
def test_glm45_python_literal_at_the_depth_bound(depth: int) -> None:
    """The Python-literal reading has the same bound (a tuple is not JSON, so a list of tuples)."""
    from tests.parsing import vocabularies

    inner = "1"
    for _ in range(depth - 1):
        inner = f"({inner},)"
    literal = f"[{inner}]"
    text = f"<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>{literal}</arg_value>\n</tool_call>"
    [call] = glm45(vocabularies.qwen_glm(), text).calls
    value = call.args()["a"]
    assert isinstance(value, str if depth > MAX_ARGUMENT_DEPTH else list)


def test_nesting_counts_levels() -> None:
    assert [json_values.nesting(v) for v in (1, [], [[1]], {"a": [{}]}, ([],))] == [0, 1, 2, 3, 2]
    assert json_values.nesting(json.loads(nested(50)), limit=10) == 11  # stops counting past the limit
