"""Chat templates rendered as transformers renders them, on real tokenizers."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import tokenizers

import tests.helpers.tokenizers_available as avail
from detok import ChatTemplateError, load_tokenizer
from detok.tokenizer.chat import compile_chat_template, render_chat_template
from detok.tokenizer.hf import HFTokenizer

CHATML_SYSTEM = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"

# A Llama-3.1 style template (written for these tests): tools as indented JSON in the system turn,
# a date from strftime_now, raise_exception for an unknown role, `bos_token` from the config.
LLAMA3_TOOLS_TEMPLATE = """\
{{- bos_token }}
{%- if tools is not none %}
    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
    {{- 'Environment: ipython\\nYear: ' + strftime_now('%Y') + '\\n\\nTools:\\n' }}
    {%- for tool in tools %}
        {{- tool | tojson(indent=2) + '\\n' }}
    {%- endfor %}
    {{- '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] not in ['system', 'user', 'assistant', 'ipython'] %}
        {{- raise_exception('Unknown role: ' + message['role']) }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {{- message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Température <en> °C",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def qwen2() -> HFTokenizer:
    return HFTokenizer.from_path(avail.hf_qwen2_dir())


@pytest.fixture(scope="module")
def llama3() -> HFTokenizer:
    """Llama 3's real tokenizer.json with the named special tokens its tokenizer_config declares."""
    raw = tokenizers.Tokenizer.from_file(str(avail.llama3_tokenizer_json()))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    return HFTokenizer(raw, "llama3", config=config, chat_template=LLAMA3_TOOLS_TEMPLATE)


@pytest.fixture(autouse=True)
def _restore_templates(qwen2: HFTokenizer) -> None:
    template = qwen2.chat_template
    yield
    qwen2.set_chat_template(template)


def test_qwen2_chatml_exact_output(qwen2: HFTokenizer) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    expected = CHATML_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    assert qwen2.apply_chat_template(messages, add_generation_prompt=False) == expected
    assert qwen2.apply_chat_template(messages) == expected + "<|im_start|>assistant\n"


def test_qwen2_own_system_message_replaces_default(qwen2: HFTokenizer) -> None:
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}]
    out = qwen2.apply_chat_template(messages)
    assert out == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    # the rendered markers are the tokenizer's real special tokens
    ids = qwen2.encode(out)
    assert ids.count(qwen2.token_to_id("<|im_start|>")) == 3
    assert ids.count(qwen2.token_to_id("<|im_end|>")) == 2


def test_llama3_template_with_tools(llama3: HFTokenizer) -> None:
    messages = [{"role": "user", "content": "  Weather in Paris?  "}]
    out = llama3.apply_chat_template(messages, tools=[WEATHER_TOOL])
    tool_json = json.dumps(WEATHER_TOOL, ensure_ascii=False, indent=2)
    year = datetime.datetime.now().strftime("%Y")
    assert out == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"Environment: ipython\nYear: {year}\n\nTools:\n{tool_json}\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # tojson as transformers defines it: non-ASCII and HTML characters kept as they are
    assert "Température <en> °C" in out
    ids = llama3.encode(out)
    assert ids[0] == llama3.token_to_id("<|begin_of_text|>")
    assert ids.count(llama3.token_to_id("<|eot_id|>")) == 2


def test_llama3_template_without_tools(llama3: HFTokenizer) -> None:
    out = llama3.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert out == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"


def test_raise_exception_becomes_chat_template_error(llama3: HFTokenizer) -> None:
    with pytest.raises(ChatTemplateError, match="Unknown role: robot"):
        llama3.apply_chat_template([{"role": "robot", "content": "beep"}])


def test_missing_template_error_says_how_to_set_one() -> None:
    gpt2 = HFTokenizer.from_path(avail.hf_gpt2_dir())
    assert gpt2.chat_template is None
    with pytest.raises(ChatTemplateError, match="no chat template") as info:
        gpt2.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert "set_chat_template" in str(info.value) and "chat_template=" in str(info.value)


def test_syntax_error_names_the_line(qwen2: HFTokenizer) -> None:
    qwen2.set_chat_template("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}")
    with pytest.raises(ChatTemplateError, match="syntax error at line 2"):
        qwen2.apply_chat_template([{"role": "user", "content": "Hi"}])


def test_runtime_errors_and_sandbox_are_chat_template_errors(qwen2: HFTokenizer) -> None:
    qwen2.set_chat_template("{{ messages[0]['content'] + 1 }}")
    with pytest.raises(ChatTemplateError, match="TypeError"):
        qwen2.apply_chat_template([{"role": "user", "content": "Hi"}])
    # the immutable sandbox refuses to mutate the caller's data
    qwen2.set_chat_template("{{ messages.append(1) }}")
    with pytest.raises(ChatTemplateError, match="SecurityError"):
        qwen2.apply_chat_template([{"role": "user", "content": "Hi"}])


def test_runtime_set_template_and_variables(qwen2: HFTokenizer) -> None:
    qwen2.set_chat_template(
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% generation %}[{{ m.role }}:{{ m.content }}]{% endgeneration %}{% endfor %}"
        "|{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token is defined }}"
        "|{{ additional_special_tokens | join(',') }}|{{ custom }}|{{ add_generation_prompt }}"
    )
    messages = [{"role": "user", "content": c} for c in "abc"]
    out = qwen2.apply_chat_template(messages, custom="kw")
    assert out == "[user:a][user:b]|<|endoftext|>|<|endoftext|>|<|endoftext|>|False|<|im_start|>,<|im_end|>|kw|True"


def test_tokenizers_sharing_a_template_render_their_own_special_tokens(qwen2: HFTokenizer, llama3: HFTokenizer) -> None:
    """The compiled template and the named special tokens are cached (per template string, per
    special-tokens object): renders never mix two tokenizers' tokens, and a render cannot change
    what the next one sees."""
    template = (
        "{{ bos_token }}|{{ eos_token }}|{{ additional_special_tokens | length }}|{{ range(2) | list }}"
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}|{{ ns.n }}"
        "|{{ strftime_now('%Y') | length }}"
    )
    old = llama3.chat_template
    try:
        for tok in (qwen2, llama3):
            tok.set_chat_template(template)
        messages = [{"role": "user", "content": "Hi"}]
        for _ in range(2):
            assert qwen2.apply_chat_template(messages) == "<|endoftext|>|<|endoftext|>|2|[0, 1]|1|4"
            assert llama3.apply_chat_template(messages) == "<|begin_of_text|>|<|eot_id|>|254|[0, 1]|1|4"
        qwen2.set_chat_template("{{ additional_special_tokens.append('x') }}")
        with pytest.raises(ChatTemplateError, match="SecurityError"):
            qwen2.apply_chat_template(messages)
        qwen2.set_chat_template("{% set b = bos_token %}{{ bos_token_extra is defined }}")
        assert qwen2.apply_chat_template(messages, bos_token_extra=1) == "True"
        qwen2.set_chat_template(template)
        assert qwen2.apply_chat_template(messages) == "<|endoftext|>|<|endoftext|>|2|[0, 1]|1|4"
    finally:
        llama3.set_chat_template(old)


def test_continue_final_message(qwen2: HFTokenizer) -> None:
    messages = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2, "}]
    out = render_chat_template(qwen2, messages, add_generation_prompt=False, continue_final_message=True)
    assert out == CHATML_SYSTEM + "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n1, 2, "
    with pytest.raises(ChatTemplateError, match="cannot both be set"):
        render_chat_template(qwen2, messages, add_generation_prompt=True, continue_final_message=True)


def test_compiled_templates_are_cached() -> None:
    first = compile_chat_template("{{ 'x' }}")
    assert compile_chat_template("{{ 'x' }}") is first
    assert compile_chat_template("{{ 'y' }}") is not first


@pytest.fixture(scope="module")
def chatml_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GPT-2's small tokenizer.json with Qwen2's ChatML chat_template.jinja beside it (fast to load)."""
    folder = tmp_path_factory.mktemp("chatml")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((avail.hf_gpt2_dir() / name).read_bytes())
    (folder / "chat_template.jinja").write_bytes((avail.hf_qwen2_dir() / "chat_template.jinja").read_bytes())
    return folder


def test_explicit_template_overrides_the_tokenizers_own(tmp_path: Path, chatml_folder: Path) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    folder = chatml_folder
    as_string = load_tokenizer(folder, chat_template="{% for m in messages %}<{{ m.content }}>{% endfor %}")
    assert as_string.apply_chat_template(messages) == "<Hi>"

    jinja_file = tmp_path / "t.jinja"
    jinja_file.write_text("{{ messages | length }} message(s)", encoding="utf-8")
    from_file = load_tokenizer(folder, chat_template=str(jinja_file))
    assert from_file.apply_chat_template(messages) == "1 message(s)"

    json_file = tmp_path / "chat_template.json"
    json_file.write_text(json.dumps({"chat_template": "J{{ messages[0].role }}"}), encoding="utf-8")
    assert load_tokenizer(folder, chat_template=json_file).apply_chat_template(messages) == "Juser"

    # without an override the folder's chat_template.jinja is used, and set_chat_template wins at runtime
    own = load_tokenizer(folder)
    assert own.apply_chat_template(messages).startswith(CHATML_SYSTEM)
    own.set_chat_template("runtime")
    assert own.apply_chat_template(messages) == "runtime"
    own.set_chat_template(None)
    with pytest.raises(ChatTemplateError):
        own.apply_chat_template(messages)


def test_template_from_tokenizer_config(tmp_path: Path) -> None:
    """A folder whose template lives in tokenizer_config.json (the older place), in the named-list form."""
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((avail.hf_gpt2_dir() / "tokenizer.json").read_bytes())
    config = {
        "eos_token": "<|endoftext|>",
        "chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "{{ messages[0].content }}{{ eos_token }}"},
        ],
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = load_tokenizer(folder)
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}]) == "Hi<|endoftext|>"
