"""gpt-oss Harmony cases (reasoning `openai_gptoss`, tools `openai`): the peers' inputs and results.

Origins: vLLM `tests/reasoning/test_gptoss_reasoning_parser.py` (its outputs; vLLM's expectations
there are `is_reasoning_end` only, the reasoning/content split below is vLLM's parse_chat_output on
them), vLLM `tests/tool_parsers/test_openai_tool_parser.py` (conversations rendered as the completion
after `<|start|>assistant`), SGLang `test/registered/unit/function_call/test_gpt_oss_detector.py` and
SGLang's GptOssDetector reasoning cases. `calls` are (name, arguments): compared as JSON values when the
expected text is JSON, else as text.
"""

from __future__ import annotations

from typing import NamedTuple


class HCase(NamedTuple):
    id: str
    output: str
    reasoning: str
    content: str
    calls: tuple[tuple[str, str], ...] = ()
    note: str = ""


R_START = "<|end|><|start|>assistant<|channel|>analysis<|message|>"
FINAL = "<|end|><|start|>assistant<|channel|>final"
TOKYO = '{"location": "Tokyo"}'


def call(name: str, args: str, ctype: str | None = "json") -> str:
    c = f" <|constrain|>{ctype}" if ctype else ""
    return f"<|start|>assistant<|channel|>commentary to=functions.{name}{c}<|message|>{args}<|call|>"


def analysis(text: str) -> str:
    return f"<|channel|>analysis<|message|>{text}<|end|>"


CASES = [
    # vLLM test_gptoss_reasoning_parser.py outputs
    HCase("basic_content", R_START + "This is reasoning" + FINAL + "<|message|>This is the rest", "This is reasoning", "This is the rest"),
    HCase("basic_reasoning_only", R_START + "This is reasoning<|end|>", "This is reasoning", ""),
    HCase("incomplete_prefix_only", R_START + "This is reasoning" + FINAL, "This is reasoning", ""),
    HCase("constrain_no_suffix", R_START + "This is reasoning" + FINAL + "<|constrain|> JSON ", "This is reasoning", ""),
    HCase("constrain_with_content", R_START + "This is reasoning" + FINAL + "<|constrain|> JSON <|message|>This is the rest", "This is reasoning", "This is the rest"),
    HCase("constrain_reply_action", R_START + "This is reasoning" + FINAL + "<|constrain|>ReplyAction <|message|>This is the rest", "This is reasoning", "This is the rest"),
    HCase(
        "multi_turn",
        "<|start|>user<|message|>1st turn user message" + R_START + "1st turn reasoning" + FINAL + "<|message|>1st turn response<|end|>"
        "<|start|>user<|message|>2nd turn user message<|end|><|start|>assistant",
        "1st turn reasoning",
        "1st turn response",
        note="user messages are neither reasoning nor content (vLLM's channels)",
    ),
    # vLLM test_openai_tool_parser.py
    HCase("no_tools", "<|channel|>final<|message|>This is a test<|return|>", "", "This is a test"),
    HCase("single_tool", analysis('User asks: "What is the weather in Tokyo?"') + call("get_current_weather", TOKYO), 'User asks: "What is the weather in Tokyo?"', "", (("get_current_weather", TOKYO),)),
    HCase("single_tool_newlines", analysis("weather") + call("get_current_weather", '{\n"location": "Tokyo"\n}'), "weather", "", (("get_current_weather", TOKYO),)),
    HCase(
        "multiple_tools",
        analysis("We need tools.")
        + call("get_current_weather", TOKYO)
        + call("get_user_location", TOKYO)
        + call("no_content_type", TOKYO, None)
        + call("not_json_no_content_type", "foo", None)
        + call("empty_args", "{}")
        + call("no_args", ""),
        "We need tools.",
        "",
        (
            ("get_current_weather", TOKYO),
            ("get_user_location", TOKYO),
            ("no_content_type", TOKYO),
            ("not_json_no_content_type", "foo"),
            ("empty_args", "{}"),
            ("no_args", "{}"),
        ),
        note='no_args: vLLM returns "" (not JSON); detok "{}"',
    ),
    HCase(
        "with_content",
        analysis("weather") + call("get_current_weather", TOKYO) + "<|start|>assistant<|channel|>final<|message|>This tool call will get the weather.<|return|>",
        "weather",
        "This tool call will get the weather.",
        (("get_current_weather", TOKYO),),
    ),
    # SGLang test_gpt_oss_detector.py
    HCase("sgl_single", '<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{"city":"Beijing"}<|call|>', "", "", (("get_weather", '{"city": "Beijing"}'),)),
    HCase("sgl_text_before", 'Let me check.<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{"city":"Beijing"}<|call|>', "", "Let me check.", (("get_weather", '{"city": "Beijing"}'),)),
    HCase("sgl_no_tool_call", "The weather is nice today.", "", "The weather is nice today."),
    HCase(
        "sgl_multiple",
        '<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{"city":"Beijing"}<|call|>'
        '<|start|>assistant<|channel|>commentary to=functions.search<|constrain|>json<|message|>{"query":"restaurants"}<|call|>',
        "",
        "",
        (("get_weather", '{"city": "Beijing"}'), ("search", '{"query": "restaurants"}')),
    ),
    HCase(
        "sgl_text_then_tool",
        "I'll look that up. <|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{\"city\":\"Beijing\", \"unit\":\"celsius\"}<|call|>",
        "",
        "I'll look that up. ",
        (("get_weather", '{"city": "Beijing", "unit": "celsius"}'),),
    ),
    # SGLang GptOssDetector (reasoning) cases
    HCase("sgl_analysis_and_final", "<|start|><|channel|>analysis<|message|>thinking hard<|end|><|channel|>final<|message|>the answer<|end|>", "thinking hard", "the answer"),
    HCase("sgl_final_only", "<|start|><|channel|>final<|message|>just the answer<|end|>", "", "just the answer"),
    # vLLM parse_chat_output: preambles (commentary without recipient) are content; messages joined by "\n"
    HCase(
        "preamble_and_final",
        analysis("a") + "<|start|>assistant<|channel|>analysis<|message|>b<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>" + call("f", "{}") + "<|start|>assistant<|channel|>final<|message|>Done.<|return|>",
        "a\nb",
        "Checking.\nDone.",
        (("f", "{}"),),
    ),
    HCase(
        "recipient_before_channel",
        analysis("x") + '<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"q": 1}<|call|>',
        "x",
        "",
        (("lookup", '{"q": 1}'),),
    ),
    HCase("builtin_tool_left_out", analysis("x") + '<|start|>assistant<|channel|>commentary to=python<|message|>print(1)<|call|>', "x", ""),
]
