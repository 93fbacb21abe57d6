"""The peers' own reasoning-parser test cases, as data: (output text, reasoning, content).

Origins: vLLM `tests/reasoning/test_<family>_reasoning_parser.py` and SGLang
`test/registered/unit/parser/test_reasoning_parser.py` (read, not copied: the inputs and expected
results only). vLLM's `None` is "" here. Where vLLM's streamed and non-streamed results differ, detok
has one result for both and the case states which one it matches (`note`).

`starts` is the request's `starts_in_reasoning` (None: the family's default).
"""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    id: str
    output: str
    reasoning: str
    content: str
    starts: bool | None = None
    note: str = ""


TOOL_BODY = "<tool_call>\n<function=bash>\n<parameter=command>\ncat /etc/hosts\n</parameter>\n</function>\n</tool_call>"

DEEPSEEK_R1 = [
    # vLLM test_deepseekr1_reasoning_parser.py
    Case("simple", "This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("complete", "This is a reasoning section</think>", "This is a reasoning section", ""),
    Case("no_content", "This is content", "This is content", ""),
    Case("multiple_lines", "This\nThat</think>This is the rest\nThat", "This\nThat", "This is the rest\nThat"),
    Case("shortest", "</think>This is the rest", "", "This is the rest"),
    Case("with_think", "<think>This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("complete_with_think", "<think>This is a reasoning section</think>", "This is a reasoning section", ""),
    Case("multiple_lines_with_think", "<think>This\nThat</think>This is the rest\nThat", "This\nThat", "This is the rest\nThat"),
    Case("think_no_end", "<think>This is a reasoning section", "This is a reasoning section", ""),
    Case("empty", "", "", ""),
    Case(
        "new_line",
        "\n<think>This is a reasoning section</think>\nThis is the rest",
        "\nThis is a reasoning section",
        "\nThis is the rest",
        note="vLLM streamed (its non-streamed result drops the text before <think>)",
    ),
    # SGLang TestDeepSeekR1Detector
    Case("sgl_r1_format", "I need to think about this. The answer is 42.", "I need to think about this. The answer is 42.", ""),
    Case("sgl_end_token", "I think this is the answer</think>The final answer is 42.", "I think this is the answer", "The final answer is 42."),
    Case("sgl_start_token", "<think>I need to think about this.</think>The answer is 42.", "I need to think about this.", "The answer is 42."),
    # SGLang TestIntegrationScenarios
    Case(
        "sgl_complete_response",
        "I need to solve this step by step. First, I'll analyze the problem. The given equation is x + 2 = 5. "
        "To solve for x, I subtract 2 from both sides: x = 5 - 2 = 3.</think>The answer is x = 3.",
        "I need to solve this step by step. First, I'll analyze the problem. The given equation is x + 2 = 5. "
        "To solve for x, I subtract 2 from both sides: x = 5 - 2 = 3.",
        "The answer is x = 3.",
    ),
]

QWEN3 = [
    # vLLM test_qwen3_reasoning_parser.py (Qwen3 / Qwen3.5 / Qwen3-Thinking-2507; thinking on by default)
    Case("without_start_token", "This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("without_start_token_complete", "This is a reasoning section</think>", "This is a reasoning section", ""),
    Case("with_think", "<think>This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("without_think", "This is the rest", "This is the rest", ""),
    Case("complete_reasoning", "<think>This is a reasoning section</think>", "This is a reasoning section", ""),
    Case("multiline", "<think>This is a reasoning\nsection</think>This is the rest\nThat", "This is a reasoning\nsection", "This is the rest\nThat"),
    Case("only_open_tag", "<think>This is a reasoning section", "This is a reasoning section", ""),
    Case("truncated_no_start_token", "This is a reasoning section", "This is a reasoning section", ""),
    Case("tool_call_no_think_end", "I need to read the file.\n\n" + TOOL_BODY, "I need to read the file.\n\n", TOOL_BODY),
    Case("tool_call_with_think_no_end", "<think>I need to read the file.\n\n" + TOOL_BODY, "I need to read the file.\n\n", TOOL_BODY),
    Case("start_and_end_in_one_delta", "<think>reasoning</think>", "reasoning", ""),
    Case("no_start_end_grouped_with_content", "reasoning section</think>content", "reasoning section", "content"),
    Case("tool_call_implicit_end_split", "I need to read the file.\n\n<tool_call>\n<function=bash>", "I need to read the file.\n\n", "<tool_call>\n<function=bash>"),
    # enable_thinking=False
    Case("thinking_disabled_plain", "This is plain content", "", "This is plain content", starts=False),
    Case("thinking_disabled_no_think_tokens", "Some output without think tokens", "", "Some output without think tokens", starts=False),
    Case("thinking_disabled_with_tool_call", "I need to read the file.\n\n" + TOOL_BODY, "", "I need to read the file.\n\n" + TOOL_BODY, starts=False),
    # SGLang TestQwen3Detector (force_reasoning=False: starts=False) and the forced variant
    Case("sgl_qwen3_format", "<think>Let me think about this problem</think>The answer is 42.", "Let me think about this problem", "The answer is 42.", starts=False),
    Case("sgl_without_thinking", "Direct answer without thinking.", "", "Direct answer without thinking.", starts=False),
    Case("sgl_forced_no_start", "I need to think about this step by step.</think>The answer is 42.", "I need to think about this step by step.", "The answer is 42.", starts=True),
    Case("sgl_forced_with_start", "<think>I need to think about this.</think>The answer is 42.", "I need to think about this.", "The answer is 42.", starts=True),
    Case("sgl_forced_streaming", "I need to think about this.</think>The answer is 42.", "I need to think about this.", "The answer is 42.", starts=True),
    # SGLang base detector (force_reasoning=False)
    Case("sgl_base_normal", "This is normal text", "", "This is normal text", starts=False),
    Case("sgl_base_start", "<think>This is reasoning", "This is reasoning", "", starts=False),
    Case("sgl_base_complete", "<think>This is reasoning</think>This is normal", "This is reasoning", "This is normal", starts=False),
    Case("sgl_base_mixed", "<think>reasoning</think>normal", "reasoning", "normal", starts=False),
    # SGLang TestReasoningParser / TestIntegrationScenarios
    Case("sgl_parse_non_stream", "<think>Let me think</think>The answer is 42.", "Let me think", "The answer is 42.", starts=False),
    Case("sgl_stream_chunks", "<think>thinking...</think>answer", "thinking...", "answer", starts=False),
    Case(
        "sgl_streaming_scenario",
        "<think>Let me analyze this problem. I need to consider multiple factors.</think>Based on my analysis, the solution is to use a different approach.",
        "Let me analyze this problem. I need to consider multiple factors.",
        "Based on my analysis, the solution is to use a different approach.",
        starts=False,
    ),
    Case("sgl_empty_reasoning_block", "<think></think>Just the answer.", "", "Just the answer.", starts=False),
    Case(
        "sgl_forced_complete",
        "Let me solve this step by step. The equation is x + 2 = 5. Subtracting 2 from both sides gives x = 3.</think>The solution is x = 3.",
        "Let me solve this step by step. The equation is x + 2 = 5. Subtracting 2 from both sides gives x = 3.",
        "The solution is x = 3.",
        starts=True,
    ),
    # vLLM's lookahead: a <tool_call> merely mentioned while thinking does not end it
    Case("tool_call_mention", "Use <tool_call> tags later.</think>Done", "Use <tool_call> tags later.", "Done"),
]

GLM45 = [
    # vLLM test_glm47_reasoning_parser.py (GLM-4.7: <think> in the prompt; glm45 and glm47 are one config)
    Case("simple", "This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("complete", "This is a reasoning section</think>", "This is a reasoning section", ""),
    Case("no_content", "This is content", "This is content", ""),
    Case("multiple_lines", "This\nThat</think>This is the rest\nThat", "This\nThat", "This is the rest\nThat"),
    Case("shortest", "</think>This is the rest", "", "This is the rest"),
    Case("with_think", "<think>This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("think_no_end", "<think>This is a reasoning section", "This is a reasoning section", ""),
    Case("empty", "", "", ""),
    # vLLM test_glm4_moe_reasoning_parser.py (GLM-4.5 writes <think> itself: the prompt did not open it)
    Case("g45_with_think", "<think>This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest", starts=False),
    Case("g45_without_think", "This is the rest", "", "This is the rest", starts=False),
    Case("g45_complete", "<think>This is a reasoning section</think>", "This is a reasoning section", "", starts=False),
    Case("g45_multiline", "<think>This is a reasoning\nsection</think>This is the rest\nThat", "This is a reasoning\nsection", "This is the rest\nThat", starts=False),
    Case("g45_empty_think_block", "<think></think>This is the rest", "", "This is the rest", starts=False),
    Case("g45_empty_think_block_no_content", "<think></think>", "", "", starts=False),
    Case(
        "g45_only_open_tag",
        "<think>This is a reasoning section",
        "This is a reasoning section",
        "",
        starts=False,
        note="vLLM streamed (its legacy non-streamed result returned the text with <think> as content)",
    ),
    # SGLang TestGlm45Detector (force_reasoning=False: starts=False; the forced cases starts=True)
    Case("sgl_tool_interrupt", "<think>plan<tool_call>get_weather<arg_key>city</arg_key>", "plan", "<tool_call>get_weather<arg_key>city</arg_key>", starts=False),
    Case("sgl_normal_reasoning", "<think>Let me think about this step by step</think>The answer is 42.", "Let me think about this step by step", "The answer is 42.", starts=False),
    Case("sgl_tool_interrupt_data", "<think>I need to think<tool_call>tool call data", "I need to think", "<tool_call>tool call data", starts=False),
    Case("sgl_multiple_tool_calls_first", "<think>thinking<tool_call>first tool<tool_call>second tool<tool_call>final tool", "thinking", "<tool_call>first tool<tool_call>second tool<tool_call>final tool", starts=False),
    Case("sgl_truncated", "<think>This is incomplete", "This is incomplete", "", starts=False),
    Case("sgl_normal_text_only", "Just the answer without any reasoning.", "", "Just the answer without any reasoning.", starts=False),
    Case("sgl_streaming_flow", "<think>thinking...</think>answer", "thinking...", "answer", starts=False),
    Case("sgl_tool_interrupt_split", "<think>thinking<tool_call>tool args", "thinking", "<tool_call>tool args", starts=False),
    Case("sgl_empty_reasoning_with_tool", "<think><tool_call>tool call", "", "<tool_call>tool call", starts=False),
    Case("sgl_forced", "This is reasoning", "This is reasoning", "", starts=True),
    Case("sgl_forced_tool", "More reasoning<tool_call>tool call", "More reasoning", "<tool_call>tool call", starts=True),
    # vLLM glm47 config: a <think> in the answer opens reasoning again; a stray </think> is absorbed
    Case("reopen", "a</think>b<think>c</think>d</think>e", "ac", "bde"),
]

KIMI_K2 = [
    # vLLM test_kimi_k2_reasoning_parser.py (Kimi-K2.5)
    Case("with_think_tags", "<think>step by step reasoning</think>final answer", "step by step reasoning", "final answer"),
    Case("empty_thinking", "<think></think>final answer", "", "final answer"),
    Case("implicit_start", "implicit reasoning with no tags", "implicit reasoning with no tags", ""),
    Case("tool_section_ends_reasoning", "some reasoning<|tool_calls_section_begin|>tool call data", "some reasoning", "<|tool_calls_section_begin|>tool call data"),
    Case("streaming_then_content", "<think>step one</think>answer", "step one", "answer"),
    Case("streaming_tool_section", "<think>thinking<|tool_calls_section_begin|>", "thinking", "<|tool_calls_section_begin|>"),
    # SGLang TestKimiK2Detector (force_reasoning=False)
    Case("sgl_tool_interrupt", "<think>thinking<|tool_calls_section_begin|><|tool_call_begin|>", "thinking", "<|tool_calls_section_begin|><|tool_call_begin|>", starts=False),
    Case("sgl_streaming_interrupt", "<think>reasoning<|tool_calls_section_begin|>", "reasoning", "<|tool_calls_section_begin|>", starts=False),
    Case("sgl_no_thinking", "Direct answer.", "", "Direct answer.", starts=False),
    Case("sgl_after_interrupt_is_normal", "<think>reasoning<|tool_calls_section_begin|><|tool_call_begin|>", "reasoning", "<|tool_calls_section_begin|><|tool_call_begin|>", starts=False),
]

MISTRAL = [
    # vLLM mistral_reasoning_parser.py / Mistral engine config: starts as answer text, [THINK] opens
    Case("with_think", "[THINK]This is a reasoning section[/THINK]This is the rest", "This is a reasoning section", "This is the rest"),
    Case("complete_with_think", "[THINK]This is a reasoning section[/THINK]", "This is a reasoning section", ""),
    Case("multiple_lines_with_think", "[THINK]This\nThat[/THINK]This is the rest\nThat", "This\nThat", "This is the rest\nThat"),
    Case("think_no_end", "[THINK]This is a reasoning section", "This is a reasoning section", ""),
    Case("empty", "", "", ""),
    Case("no_think", "This is content", "", "This is content"),
    Case("eot_without_bot", "This is content[/THINK] and more", "", "This is content and more"),
    Case("text_before_bot", "pre[THINK]reason[/THINK]post", "reason", "prepost"),
    Case(
        "new_line",
        "\n[THINK]This is a reasoning section[/THINK]\nThis is the rest",
        "This is a reasoning section",
        "\n\nThis is the rest",
        note="the text before [THINK] is content (vLLM's current parser); vLLM's older test put it in reasoning",
    ),
    # vLLM test_mistral_reasoning_parser.py (Magistral-2509, its older default: starts in reasoning)
    Case("simple", "This is a reasoning section[/THINK]This is the rest", "This is a reasoning section", "This is the rest", starts=True),
    Case("complete", "This is a reasoning section[/THINK]", "This is a reasoning section", "", starts=True),
    Case("no_content", "This is content", "This is content", "", starts=True),
    Case("multiple_lines", "This\nThat[/THINK]This is the rest\nThat", "This\nThat", "This is the rest\nThat", starts=True),
    Case("shortest", "[/THINK]This is the rest", "", "This is the rest", starts=True),
    Case("reasoning_with_think", "[THINK]This is a reasoning section[/THINK]This is the rest", "This is a reasoning section", "This is the rest", starts=True),
    # vLLM Mistral engine config: [TOOL_CALLS] inside reasoning ends it; [THINK] in the answer reopens
    Case("tool_calls_ends_reasoning", "[THINK]plan[TOOL_CALLS]get_weather", "plan", "[TOOL_CALLS]get_weather"),
    Case("reopen", "[THINK]a[/THINK]b[THINK]c[/THINK]d", "ac", "bd"),
]


# The table families (detok.parsing.family_tables); their cases with tools are in tests/parsing/cases/.
SEED_OSS = [
    # vLLM seed_oss reasoning parser (a deepseek_r1-like <seed:think>; the start may be in the prompt)
    Case("with_think", "<seed:think>This is a reasoning section</seed:think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("no_start", "This is a reasoning section</seed:think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("no_end", "<seed:think>This is a reasoning section", "This is a reasoning section", ""),
    Case("budget_reflect_is_text", "<seed:think>a</seed:cot_budget_reflect>b</seed:think>c", "a</seed:cot_budget_reflect>b", "c"),
    Case("thinking_off", "This is the rest", "", "This is the rest", starts=False),
]
NEMOTRON_V3 = [
    # llama.cpp nemotron_v3 format (prompt ends with <think>\n); nano_v3 reasoning (deepseek_r1-like)
    Case("no_start", "This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("with_think", "<think>This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("tool_call_from_thought", "plan\n" + TOOL_BODY, "plan\n", TOOL_BODY),
    Case("tool_call_mentioned", "use <tool_call> later</think>ok", "use <tool_call> later", "ok"),
    Case("thinking_off", "This is the rest", "", "This is the rest", starts=False),
]
OLMO3 = [
    # vLLM olmo3 reasoning parser (the generation prompt ends with <think>)
    Case("no_start", "Let me add 2 and 2.</think>The answer is 4.", "Let me add 2 and 2.", "The answer is 4."),
    Case("with_think", "<think>abc</think>xyz", "abc", "xyz"),
    Case("no_end", "<think>abc", "abc", ""),
    Case("thinking_off", "xyz", "", "xyz", starts=False),
]
MINIMAX_M2 = [
    # vLLM minimax_m2 reasoning parser: the model does not write <think>; all before </think> is reasoning
    Case("no_start", "The user greets me.</think>\n\nHello!", "The user greets me.", "\n\nHello!"),
    Case("truncated", "thinking without end", "thinking without end", ""),
    Case("call_block_ends_reasoning", "plan<minimax:tool_call><invoke name=\"f\"></invoke></minimax:tool_call>", "plan",
         "<minimax:tool_call><invoke name=\"f\"></invoke></minimax:tool_call>"),
]
DEEPSEEK_V3 = [
    # vLLM deepseek_v3 reasoning parser: the `thinking` kwarg (default false) chooses deepseek_r1's rules or none
    Case("thinking_default_off", "abc</think>xyz", "", "abcxyz", note="vLLM's identity parser keeps the stray </think>"),
    Case("thinking_on", "abc</think>xyz", "abc", "xyz", starts=True),
    Case("thinking_on_with_think", "<think>abc</think>xyz", "abc", "xyz", starts=True),
]
GEMMA4 = [
    # vLLM 0.33 vllm/parser/gemma4.py: a <|channel> block the model opens, its `thought\n` name dropped
    Case("thought_then_answer", "<|channel>thought\nLet me think.<channel|>The answer is 4.", "Let me think.", "The answer is 4."),
    Case("no_channel", "The answer is 4.", "", "The answer is 4."),
    Case("prompt_opened_channel", "plan it<channel|>Answer.", "plan it", "Answer.", starts=True),
    Case("only_the_name", "<|channel>thought<channel|>Hi", "", "Hi", note="vLLM's streamed result (non-streamed: None too)"),
    Case("not_the_name", "<|channel>thinking hard<channel|>Hi", "thinking hard", "Hi"),
    Case("no_end", "<|channel>thought\nstill going", "still going", ""),
    Case("stray_end_absorbed", "Hi<channel|> there", "", "Hi there"),
    Case("call_from_thought", "<|channel>thought\nweather?<|tool_call>call:f{}<tool_call|>", "weather?",
         "<|tool_call>call:f{}<tool_call|>"),
]
KIMI_K3 = [
    # vLLM kimi_k3_reasoning_parser.py: the XTML think channel; the response channel's wrapper stripped
    Case("think_then_response", "<|open|>think<|sep|>abc<|close|>think<|sep|><|open|>response<|sep|>xyz<|close|>response<|sep|>",
         "abc", "xyz"),
    Case("prefix_consumed", "abc<|close|>think<|sep|>xyz<|close|>message<|sep|>", "abc", "xyz", starts=True),
    Case("no_think_channel", "<|open|>response<|sep|>xyz<|close|>response<|sep|>", "", "xyz"),
    Case("thinking_off", "xyz<|close|>message<|sep|>", "", "xyz", starts=False),
    Case("unclosed", "<|open|>think<|sep|>abc", "abc", ""),
]
STEP3P5 = [
    # vLLM step3p5 (qwen3's grammar, thinking always on: the template prefills <think>\n)
    Case("no_start", "This is a reasoning section</think>This is the rest", "This is a reasoning section", "This is the rest"),
    Case("with_think", "<think>abc</think>xyz", "abc", "xyz"),
    Case("truncated", "still thinking", "still thinking", ""),
    Case("call_from_thought", "plan\n" + TOOL_BODY, "plan\n", TOOL_BODY),
    Case("tool_call_mentioned", "use <tool_call> later</think>ok", "use <tool_call> later", "ok"),
]
