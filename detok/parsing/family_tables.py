"""The families, each a table (`detok.parsing.family_table`) run by its grammar's engine, by vLLM's names. Each
row says whose model writes it and how its format is known."""

from __future__ import annotations

from detok.parsing.family_table import FamilyTable

THINK, END_THINK = "<think>", "</think>"
DEEPSEEK_CALLS, DEEPSEEK_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DEEPSEEK_REQUIRED = (DEEPSEEK_CALLS, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>")
KIMI_SECTION, KIMI_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
DSML_V32_CALLS, DSML_V4_CALLS = "<｜DSML｜function_calls>", "<｜DSML｜tool_calls>"
GEMMA4_CHANNEL, GEMMA4_CHANNEL_END, GEMMA4_CALL = "<|channel>", "<channel|>", "<|tool_call>"
# Kimi K3's XTML: elements `<|open|>NAME attrs<|sep|>` ... `<|close|>NAME<|sep|>` of three special tokens
K3_RESPONSE = ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")

# Every family's cases are data, tests/parsing/cases/<family>.json, run by tests/parsing/test_family_tables.py
REASONING_TABLES: tuple[FamilyTable, ...] = (
    # DeepSeek-R1 / V3.1+ thinking (SGLang's deepseek-r1 forces it): R1 often omits <think>, its template
    # opens it in the prompt, so all before </think> is reasoning; a calls section opened straight from
    # the thought (a special token nothing else writes) ends it, as a tool-call start in vLLM's grammars
    FamilyTable("think", ("deepseek_r1", "deepseek-r1"), THINK, END_THINK, "DeepSeek-R1 / V3.1+ thinking",
                starts_in_reasoning=True, implicit_end=DEEPSEEK_CALLS),
    # Qwen3 / QwQ (SGLang's qwen3, qwen3-thinking): the template opens <think> in the prompt unless
    # enable_thinking is false. <tool_call> from the thought ends it once either Qwen call format
    # follows (Qwen3.5's XML `<function=` for qwen3_coder, Qwen3's JSON `{` for hermes), so a mention
    # stays reasoning (vLLM's lookahead)
    FamilyTable("think", ("qwen3", "qwen3-thinking"), THINK, END_THINK, "Qwen3 / QwQ thinking",
                starts_in_reasoning=True, implicit_end="<tool_call>", confirm=("<function", "{"),
                confirm_pattern=r"<function[\s=]|\{"),
    # GLM-4.5 / 4.6 / 4.7 (vLLM's glm45 = glm47, one engine config): GLM-4.7's template opens <think>;
    # its call `<tool_call>NAME<arg_key>` has nothing to confirm; a <think> in the answer reopens
    FamilyTable("think", ("glm45", "glm47"), THINK, END_THINK, "GLM-4.5 / 4.6 / 4.7",
                starts_in_reasoning=True, implicit_end="<tool_call>", reopen=True),
    # Kimi K2 thinking: on unless the `thinking` kwarg turns it off; its calls section ends reasoning
    FamilyTable("think", ("kimi_k2",), THINK, END_THINK, "Kimi K2 thinking",
                starts_in_reasoning=True, implicit_end=KIMI_SECTION),
    # Mistral (Magistral, Mistral-Small 3.2+/4): control tokens of Tekken v13+ (vLLM requires them as
    # tokens); [THINK] in the answer reopens (vLLM's Mistral config), [TOOL_CALLS] ends reasoning
    FamilyTable("think", ("mistral",), "[THINK]", "[/THINK]", "Mistral / Magistral",
                implicit_end="[TOOL_CALLS]", reopen=True, required_tokens=("[THINK]", "[/THINK]")),
    # gpt-oss (SGLang's gpt-oss): Harmony's channels say what a message is (`detok.parsing.harmony`)
    FamilyTable("harmony", ("openai_gptoss", "gpt-oss"), "", "", "OpenAI gpt-oss (Harmony)"),
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
    # Hermes 2/3, Qwen2.5 / Qwen3 and many fine-tunes (SGLang's qwen25, qwen): a JSON call per region
    FamilyTable("json_region", ("hermes", "qwen25", "qwen"), "<tool_call>", "</tool_call>", "Hermes / Qwen2.5 / Qwen3"),
    # Qwen3-Coder / Qwen3.5+ XML calls (SGLang: same name); a <function= without the region is a call too
    FamilyTable("xml_parameters", ("qwen3_coder",), "<tool_call>", "</tool_call>", "Qwen3-Coder / Qwen3.5+ XML"),
    # GLM-4.5 / 4.6 / 4.7 (vLLM also glm47; SGLang glm45, glm): `<tool_call>NAME\n<arg_key>k</arg_key>
    # <arg_value>v</arg_value></tool_call>`, every tag a token
    FamilyTable("key_value_tags", ("glm45", "glm47", "glm"), "<tool_call>", "</tool_call>", "GLM-4.5 / 4.6 / 4.7"),
    # DeepSeek V3 (SGLang deepseekv3): `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
    # <｜tool▁call▁end｜>` in a calls section
    FamilyTable("section_calls", ("deepseek_v3", "deepseekv3"), DEEPSEEK_CALLS, DEEPSEEK_CALLS_END, "DeepSeek V3",
                call_head="type_name", required_tokens=DEEPSEEK_REQUIRED),
    # DeepSeek V3.1 (SGLang deepseekv31): `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`
    FamilyTable("section_calls", ("deepseek_v31", "deepseekv31"), DEEPSEEK_CALLS, DEEPSEEK_CALLS_END, "DeepSeek V3.1",
                required_tokens=DEEPSEEK_REQUIRED),
    # Kimi K2: the head is the model's call id `functions.NAME:IDX`, kept as the call's id; the singular
    # section tags are accepted as vLLM does
    FamilyTable("section_calls", ("kimi_k2",), KIMI_SECTION, KIMI_SECTION_END, "Kimi K2", call_head="native_id",
                terminals=(("start_alias", "<|tool_call_section_begin|>"), ("end_alias", "<|tool_call_section_end|>"),
                           ("call_begin", "<|tool_call_begin|>"), ("call_end", "<|tool_call_end|>"),
                           ("sep", "<|tool_call_argument_begin|>")),
                required_tokens=(KIMI_SECTION, KIMI_SECTION_END, "<|tool_call_begin|>",
                                 "<|tool_call_argument_begin|>", "<|tool_call_end|>")),
    # Llama 3.1 / 3.2 / 4 JSON calls (vLLM also llama4_json; SGLang llama3), maybe after <|python_tag|>
    FamilyTable("json_objects", ("llama3_json", "llama4_json", "llama3"), "<|python_tag|>", "", "Llama 3.x / 4 JSON"),
    # Mistral (SGLang: same name): [TOOL_CALLS] then a JSON array (tokenizers before v11) or NAME[ARGS]{...}
    # per call (v11+); as vLLM, a vocabulary without the [TOOL_CALLS] token is a configuration error
    FamilyTable("marker_calls", ("mistral",), "[TOOL_CALLS]", "", "Mistral", required_tokens=("[TOOL_CALLS]",)),
    # gpt-oss (vLLM's openai; SGLang gpt-oss): a message to `functions.NAME` (or a bare tool name) is a call
    FamilyTable("harmony_calls", ("openai", "gpt-oss"), "", "", "OpenAI gpt-oss (Harmony)"),
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
    FamilyTable("invoke_parameters", ("deepseek_v32",), "<｜DSML｜function_calls>", "</｜DSML｜function_calls>",
                "DeepSeek V3.2 DSML", tag_prefix="｜DSML｜"),
    # DeepSeek V4: V3.2's DSML in a <｜DSML｜tool_calls> region (vLLM's deepseek_v4)
    FamilyTable("invoke_parameters", ("deepseek_v4",), "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>",
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
