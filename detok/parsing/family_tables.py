"""The families that are tables (`detok.parsing.family_table`), by vLLM's names. Each row says whose
model writes it and how its format is known; the cases each runs are in tests/parsing/cases/."""

from __future__ import annotations

from detok.parsing.family_table import FamilyTable

THINK, END_THINK = "<think>", "</think>"
DEEPSEEK_CALLS = "<｜tool▁calls▁begin｜>"
DSML_V32_CALLS, DSML_V4_CALLS = "<｜DSML｜function_calls>", "<｜DSML｜tool_calls>"
GEMMA4_CHANNEL, GEMMA4_CHANNEL_END, GEMMA4_CALL = "<|channel>", "<channel|>", "<|tool_call>"
# Kimi K3's XTML: elements `<|open|>NAME attrs<|sep|>` ... `<|close|>NAME<|sep|>` of three special tokens
K3_RESPONSE = ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")

REASONING_TABLES: tuple[FamilyTable, ...] = (
    # DeepSeek V3.1 / V3.2 / V4 hybrid: thinking off unless the `thinking` kwarg turns it on (vLLM's
    # deepseek_v3 picks R1's parser or none by it); a calls section from the thought ends it, or with
    # a DSML tool parser (V3.2, V4) its DSML region, as vLLM's deepseek_v32 / v4 grammars
    FamilyTable("think", ("deepseek_v3",), THINK, END_THINK, "DeepSeek V3.1+ hybrid thinking",
                implicit_end=DEEPSEEK_CALLS, tool_implicit_ends=(DSML_V32_CALLS, DSML_V4_CALLS)),
    # Seed-OSS: the template opens <seed:think> in the prompt. The model closes its thought before a
    # call and may spell a whole call out while thinking (vLLM's seed_oss cases): no implicit end
    FamilyTable("think", ("seed_oss",), "<seed:think>", "</seed:think>", "ByteDance Seed-OSS",
                starts_in_reasoning=True),
    # Nemotron 3 (Nano, Super): the template ends the prompt with `<think>\n`; its calls are Qwen3-Coder
    # XML, whose `<tool_call>` ends reasoning once `<function=` follows
    FamilyTable("think", ("nemotron_v3", "nano_v3"), THINK, END_THINK, "NVIDIA Nemotron 3",
                starts_in_reasoning=True, implicit_end="<tool_call>", confirm=("<function=",)),
    # OLMo 3 Think: the generation prompt ends with `<think>`
    FamilyTable("think", ("olmo3",), THINK, END_THINK, "AllenAI OLMo 3 Think", starts_in_reasoning=True),
    # MiniMax M2 / M3: the model does not write <think> (vLLM's minimax_m2: all before </think> is
    # reasoning); its call block ends reasoning
    FamilyTable("think", ("minimax_m2", "minimax_m3"), THINK, END_THINK, "MiniMax M2 / M3",
                starts_in_reasoning=True, implicit_end="<minimax:tool_call>"),
    # Gemma 4: a `<|channel>thought\n`...`<channel|>` block the model opens itself (vLLM's gemma4: the
    # thinking kwarg does not pre-open it; a prompt ending inside an open channel does); a call
    # straight from the thought ends it
    FamilyTable("think", ("gemma4",), GEMMA4_CHANNEL, GEMMA4_CHANNEL_END, "Google Gemma 4",
                implicit_end=GEMMA4_CALL, reasoning_prefix="thought\n", thinking_switch=False),
    # Kimi K3: a think channel (the generation prefix may open it: the prompt says), then the response
    # channel whose wrapper is dropped from the content (vLLM's kimi_k3)
    FamilyTable("think", ("kimi_k3",), "<|open|>think<|sep|>", "<|close|>think<|sep|>", "Moonshot Kimi K3",
                content_drops=K3_RESPONSE, keeps_special_tokens=True),
    # Step-3.5 / 3.7: the template always prefills `<think>\n` (no switch: enable_thinking ignored, as
    # vLLM's step3p5); its calls are Qwen3's XML, whose `<tool_call>` ends reasoning once `<function=` follows
    FamilyTable("think", ("step3p5",), THINK, END_THINK, "StepFun Step-3.5 / 3.7", starts_in_reasoning=True,
                implicit_end="<tool_call>", confirm=("<function=",), thinking_switch=False),
)

TOOL_TABLES: tuple[FamilyTable, ...] = (
    # Qwen3's XML calls under vLLM's second name (its streaming variant of qwen3_coder)
    FamilyTable("xml_parameters", ("qwen3_xml",), "<tool_call>", "</tool_call>", "Qwen3-Coder / Qwen3.5+ XML"),
    # Seed-OSS: Qwen3-Coder's XML inside <seed:tool_call>
    FamilyTable("xml_parameters", ("seed_oss",), "<seed:tool_call>", "</seed:tool_call>", "ByteDance Seed-OSS"),
    # Qwen3 / Qwen3-2507's JSON calls under vLLM's second name
    FamilyTable("json_region", ("qwen3_json",), "<tool_call>", "</tool_call>", "Qwen3 / Qwen3-2507 JSON"),
    # the whole output a Python list of calls (vLLM's pythonic: Llama 3.2, ToolACE and others)
    FamilyTable("pythonic", ("pythonic",), "", "", "Python call lists"),
    # Llama 4: the same list, maybe between its python tags
    FamilyTable("pythonic", ("llama4_pythonic",), "<|python_start|>", "<|python_end|>", "Llama 4 pythonic"),
    # MiniMax M2 / M3: invoke/parameter XML in <minimax:tool_call> (vLLM's minimax_m2, minimax_m3)
    FamilyTable("invoke_parameters", ("minimax_m2", "minimax_m3"), "<minimax:tool_call>", "</minimax:tool_call>",
                "MiniMax M2 / M3"),
    # DeepSeek V3.2: DSML, each parameter saying whether its value is a raw string or JSON
    FamilyTable("invoke_parameters", ("deepseek_v32",), DSML_V32_CALLS, "</｜DSML｜function_calls>",
                "DeepSeek V3.2 DSML", tag_prefix="｜DSML｜"),
    # DeepSeek V4: V3.2's DSML in a <｜DSML｜tool_calls> region (vLLM's deepseek_v4)
    FamilyTable("invoke_parameters", ("deepseek_v4",), DSML_V4_CALLS, "</｜DSML｜tool_calls>",
                "DeepSeek V4 DSML", tag_prefix="｜DSML｜"),
    # Granite 4: a JSON object per <tool_call> region
    FamilyTable("json_region", ("granite4",), "<tool_call>", "</tool_call>", "IBM Granite 4"),
    # Gemma 4: `call:NAME{key:<|"|>text<|"|>,n:1}` per region, strings between its <|"|> token
    FamilyTable("keyed_call", ("gemma4",), GEMMA4_CALL, "<tool_call|>", "Google Gemma 4", delimiter='<|"|>'),
    # Kimi K3: XTML call/argument elements in a tools channel, `type="string"` a raw string, else JSON
    FamilyTable("invoke_parameters", ("kimi_k3",), "<|open|>tools<|sep|>", "<|close|>tools<|sep|>", "Moonshot Kimi K3",
                tags=("<|open|>call tool=", "<|close|>call<|sep|>", "<|open|>argument key=", "<|close|>argument<|sep|>"),
                xtml=True, content_drops=K3_RESPONSE),
    # Step-3.5 / 3.7: Qwen3's XML calls (vLLM's step3p5)
    FamilyTable("xml_parameters", ("step3p5",), "<tool_call>", "</tool_call>", "StepFun Step-3.5 / 3.7"),
)
