"""Facts (inputs and expected outputs) from the peers' own test suites, as data for tests/test_parity_*.py.

Each case names the peer test it comes from. Texts are encoded with the named tokenizer of
`stream_roster` (without special tokens) unless given as ids. Where detok deliberately differs
because the peer is wrong, `differs` says why (docs/tokenizers.md's comparison section lists them) and
`detok_expected` is what detok gives instead; the peer's value is kept as `expected`.

Written for this project from the facts of: vLLM tests/tokenizers_/test_detokenize.py and
tests/detokenizer/*; SGLang sgl-router tests/tokenizer_integration.rs and src/tokenizer/stop.rs
tests; Hugging Face tokenizers bindings/python/tests/bindings/test_tokenizer.py (DecodeStream).
"""

from __future__ import annotations

import dataclasses
from typing import Any

Ids = tuple[int, ...]

# Why detok differs where it does (docs/tokenizers.md, "Compared with SGLang, vLLM and TensorRT-LLM")
PROMPT_MID_CHARACTER = (
    "the prompt ends inside a character: the peer re-emits prompt text (vLLM #48853) or, in vLLM's own "
    "expected value, loses the character; detok's first delta is the completed character, nothing else"
)
DROPPED_INCOMPLETE_TAIL = (
    "an incomplete character at the end of the output: the peer's DecodeStream drops it, detok emits "
    "U+FFFD (UTF-8 decoding with replacement, as a full decode gives)"
)
OOV_IS_AN_ERROR = (
    "an id outside the vocabulary: the peer emits nothing and carries on, detok finishes the request "
    "with reason 'error' naming the id"
)


@dataclasses.dataclass(frozen=True)
class Case:
    source: str  # the peer's test it comes from
    name: str
    tokenizer: str  # a stream_roster name, or a tokenizer the test builds ("hf-added-words", ...)
    prompt: str | Ids = ""
    output: str | Ids = ""
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    steps: tuple[int, ...] = (1,)  # ids per step, cycled ((0,): all in one step)
    expected: str | tuple[str, ...] = ""  # the text, or each step's text
    finish: tuple[str, str | int | None] | None = None  # (reason, matched); None: not asserted
    ignore_eos: bool = True
    joint: bool = False  # prompt and output encoded as one text, split after the prompt's ids
    prompt_tokens: int | None = None  # the output text's first ids are the prompt
    differs: str | None = None
    detok_expected: str | tuple[str, ...] | None = None


# ---- vLLM tests/tokenizers_/test_detokenize.py ----------------------------------------------------
VLLM_DETOKENIZE = "vllm tests/tokenizers_/test_detokenize.py"
# test_decode_streaming: every truth, with and without a prompt (its first half), in the (skip,
# spaces) modes vLLM runs; the expected text is decode(bos + truth + eos)[len(decode(prompt)):]
VLLM_TRUTH = (
    "Hello here, this is a simple test",
    "vLLM is a high-throughput and memory-efficient inference and serving engine for LLMs. It is designed "
    "to be used in production environments, where inference and serving",
    "我很感谢你的热情",
    "ပုံပြင်လေးပြောပြပါ်",  # Tekken edge case (vLLM #9625): tokens map to bytes of incomplete characters
    "Some text with adjacent special tokens                <|padding|><|padding|><fim_prefix><fim_middle>"
    "<fim_suffix>other text<fim_pad>",
)
VLLM_MODES = ((True, True), (False, True), (False, False))  # (skip_special_tokens, spaces_between_special_tokens)
# the real tokenizers we have for vLLM's list (GPT-2 family, Llama-3.2, CodeLlama / Llama-2, Pixtral's
# Tekken); mistral-common runs with skip_special_tokens=True only, as in vLLM's test
VLLM_TOKENIZERS = ("gpt2", "qwen2", "llama3", "deepseek", "cl100k", "gguf-llama-spm", "gguf-gemma-4",
                   "mistral-spm-v7", "mistral-tekken")
VLLM_SKIP_ONLY = ("mistral-spm-v7", "mistral-tekken")

VLLM_DETOKENIZE_CASES = [
    # test_mistral_edge_case (Pixtral's Tekken): the streamed text is the truth
    Case(VLLM_DETOKENIZE, "mistral_edge_case-burmese", "mistral-tekken", output="ပုံပြင်လေးပြောပြပါ",
         expected="ပုံပြင်လေးပြောပြပါ"),
    Case(VLLM_DETOKENIZE, "mistral_edge_case-urgency", "mistral-tekken", output="URGENCY🌶️",
         expected="URGENCY🌶️"),
]
# test_oov_decode: id len(tokenizer) decodes to "" (per tokenizer, built by the test)

# ---- vLLM tests/detokenizer/* -----------------------------------------------------------------------
VLLM_STOP_CHECK = "vllm tests/detokenizer/test_check_stop_strings.py"
VLLM_STOP_TERMINATES = "vllm tests/detokenizer/test_stop_string_while_stop_model_terminates.py"
VLLM_MIN_TOKENS = "vllm tests/detokenizer/test_min_tokens.py"
VLLM_STOP_STRINGS = "vllm tests/detokenizer/test_stop_strings.py"
VLLM_STOP_REASON = "vllm tests/detokenizer/test_stop_reason.py"

_LLAMA2_PROMPT = "A story about vLLM:\n"
_LLAMA2_OUTPUT = "VLLM is a 100% volunteer organization. We are a group of people who love short stories."
_MIN_TOKENS_TEXT = "Hello, my name is Lee, and I'm a student in the college of engineering"

VLLM_DETOKENIZER_CASES = [
    # check_stop_strings: the earliest-completing stop wins whatever the list order; ties: list order
    *(Case(VLLM_STOP_CHECK, f"earliest_completing-{'-'.join(stop)}-{inc}", "qwen2", output=" The user is a",
           params={"stop": stop, "include_stop_str_in_output": inc}, steps=steps,
           expected=" The user is" if inc else " The user ", finish=("stop", "is"))
      for stop in (("a", "is"), ("is", "a")) for inc in (False, True) for steps in [(1,), (0,)]),
    Case(VLLM_STOP_CHECK, "completion_position_not_start", "qwen2", output="abc",
         params={"stop": ("abc", "b")}, steps=(0,), expected="a", finish=("stop", "b")),
    Case(VLLM_STOP_CHECK, "ties_by_list_order-ab-b", "qwen2", output="ab", params={"stop": ("ab", "b")},
         steps=(0,), expected="", finish=("stop", "ab")),
    Case(VLLM_STOP_CHECK, "ties_by_list_order-b-ab", "qwen2", output="ab", params={"stop": ("b", "ab")},
         steps=(0,), expected="a", finish=("stop", "b")),
    Case(VLLM_STOP_CHECK, "single_stop", "qwen2", output="hello world.", params={"stop": (".",)},
         expected="hello world", finish=("stop", ".")),
    Case(VLLM_STOP_CHECK, "single_stop-include", "qwen2", output="hello world.",
         params={"stop": (".",), "include_stop_str_in_output": True}, expected="hello world.", finish=("stop", ".")),
    Case(VLLM_STOP_CHECK, "no_match", "qwen2", output="hello", params={"stop": ("zzz",)}, expected="hello",
         finish=("length", None)),
    Case(VLLM_STOP_CHECK, "no_stops", "qwen2", output="hello", expected="hello", finish=("length", None)),
    # a stop string in the text of the step that a stop token ends still wins ("abcdeZ", Z the stop
    # token, stop "cd")
    *(Case(VLLM_STOP_TERMINATES, f"stop_string_before_stop_token-{inc}", "qwen2", output="abcdeZ",
           params={"stop": ("cd",), "include_stop_str_in_output": inc, "stop_token_ids": ("Z",)},
           steps=(0,), expected="abcd" if inc else "ab", finish=("stop", "cd"))
      for inc in (False, True)),
    # min_tokens with stop strings (vLLM #22014): opt-125m's vocabulary is GPT-2's
    Case(VLLM_MIN_TOKENS, "min_tokens-0-none", "gpt2", output=_MIN_TOKENS_TEXT, prompt_tokens=4, steps=(0,),
         expected=" is Lee, and I'm a student in the college of engineering"),
    Case(VLLM_MIN_TOKENS, "min_tokens-0-e", "gpt2", output=_MIN_TOKENS_TEXT, prompt_tokens=4,
         params={"stop": ("e",)}, steps=(0,), expected=" is L", finish=("stop", "e")),
    Case(VLLM_MIN_TOKENS, "min_tokens-5-e", "gpt2", output=_MIN_TOKENS_TEXT, prompt_tokens=4,
         params={"stop": ("e",), "min_tokens": 5}, steps=(0,), expected=" is Lee, and I'm a stud",
         finish=("stop", "e")),
    # test_stop_strings (Llama-2 greedy output of "A story about vLLM:\n"; 13013 is " organization")
    *(Case(VLLM_STOP_STRINGS, f"{name}-{inc}", "gguf-llama-spm", prompt=_LLAMA2_PROMPT, output=_LLAMA2_OUTPUT,
           joint=True, params={**params, "include_stop_str_in_output": inc}, expected=want[inc],
           finish=("stop", reason))
      for name, params, want, reason in (
          ("stop_basic", {"stop": (".",)}, ("VLLM is a 100% volunteer organization",
                                            "VLLM is a 100% volunteer organization."), "."),
          ("stop_multi_tokens", {"stop": ("group of peo", "short")},
           ("VLLM is a 100% volunteer organization. We are a ",
            "VLLM is a 100% volunteer organization. We are a group of peo"), "group of peo"),
          ("stop_partial_token", {"stop": ("gani",)},
           ("VLLM is a 100% volunteer or", "VLLM is a 100% volunteer organi"), "gani"),
          ("stop_token_id", {"stop_token_ids": (13013,)},
           ("VLLM is a 100% volunteer", "VLLM is a 100% volunteer organization"), 13013),
      ) for inc in (False, True)),
    # test_stop_reason (distilgpt2: GPT-2's vocabulary): a stop id is the reason, a stop string is,
    # EOS is (vLLM reports null for it: the frontend maps the primary EOS id to null)
    Case(VLLM_STOP_REASON, "stop_token", "gpt2", output="A sentence. And more.", params={"stop_token_ids": (".",)},
         expected="A sentence", finish=("stop", ".")),
    Case(VLLM_STOP_REASON, "stop_string", "gpt2", output="A sentence. And more.", params={"stop": (".",)},
         expected="A sentence", finish=("stop", ".")),
    Case(VLLM_STOP_REASON, "eos", "gpt2", output="A sentence<|endoftext|> more", ignore_eos=False,
         expected="A sentence", finish=("stop", "<|endoftext|>")),
]

# ---- Hugging Face tokenizers: DecodeStream tests ----------------------------------------------------
HF_TOKENIZER_TESTS = "huggingface/tokenizers bindings/python/tests/bindings/test_tokenizer.py"
_THAI = (19567, 255, 19567, 109)  # GPT-2's ids of "อั": byte-level pieces of a two-character text
_LLAMA31_CHAT = (
    128000, 128006, 9125, 128007, 271, 38766, 1303, 33025, 2696, 25, 6790, 220, 2366, 18, 198, 15724, 2696, 25,
    220, 1627, 10263, 220, 2366, 19, 271, 9514, 527, 264, 11190, 18328, 13, 128009, 128006, 882, 128007, 271,
    15339, 11, 1268, 527, 499, 30, 128009, 128006, 78191, 128007, 271,
)
HF_CASES = [
    # test_decode: a BPE with the words as added tokens and no decoder (tokens joined by spaces)
    Case(HF_TOKENIZER_TESTS, "decode-steps", "hf-added-words", output=(0, 1, 2, 3),
         params={"skip_special_tokens": False}, expected=("my", " name", " is", " john")),
    Case(HF_TOKENIZER_TESTS, "decode-prefix_ids", "hf-added-words", prompt=(0, 1, 2), output=(3,),
         expected=(" john",)),
    # test_decode_stream_copy_and_prefix_ids: the prefilled stream's chunk equals the stepped one's
    Case(HF_TOKENIZER_TESTS, "copy_and_prefix_ids", "hf-added-words", prompt=(0, 1, 2), output=(3,),
         params={"skip_special_tokens": False}, expected=(" john",)),
    # test_decode_stream_fallback (GPT-2): a character split over byte-level tokens
    Case(HF_TOKENIZER_TESTS, "fallback-one_by_one", "gpt2", output=_THAI, expected=("", "อ", "", "ั")),
    Case(HF_TOKENIZER_TESTS, "fallback-one_step", "gpt2", output=_THAI, steps=(4,), expected=("อั",)),
    Case(HF_TOKENIZER_TESTS, "fallback-one_then_three", "gpt2", output=_THAI, steps=(1, 3), expected=("", "อั")),
    Case(HF_TOKENIZER_TESTS, "fallback-emitted_then_rest", "gpt2", output=_THAI, steps=(1, 1, 2),
         expected=("", "อ", "ั")),
    Case(HF_TOKENIZER_TESTS, "fallback-invalid_prefix", "gpt2", prompt=_THAI[:3], output=_THAI[3:],
         expected=("อั",), differs=PROMPT_MID_CHARACTER, detok_expected=("ั",)),
    # test_decode_skip_special_tokens (Llama-3.1's ids; Llama-3's tokenizer has the same ones)
    Case(HF_TOKENIZER_TESTS, "skip_special-four", "llama3", prompt=(40,), output=(2846, 40, 40, 40), steps=(4,),
         expected=("'mIII",)),
    Case(HF_TOKENIZER_TESTS, "skip_special-chat_prefix", "llama3", prompt=_LLAMA31_CHAT, output=(40,),
         expected=("I",)),
    Case(HF_TOKENIZER_TESTS, "skip_special-one", "llama3", prompt=(40,), output=(2846,), expected=("'m",)),
    # test_decode_stream: a Unigram with byte fallback and the ByteFallback decoder alone ...
    Case(HF_TOKENIZER_TESTS, "byte_fallback", "hf-unigram-bytefallback", output=(1, 2, 3),
         params={"skip_special_tokens": False}, expected=(" ", "", "é")),
    # ... and one with the Metaspace decoder
    Case(HF_TOKENIZER_TESTS, "metaspace", "hf-unigram-metaspace", output=(1, 1),
         params={"skip_special_tokens": False}, expected=("This", " This")),
    # measured, not asserted by the peer: a stream that ends inside a character
    Case("huggingface/tokenizers DecodeStream (measured)", "incomplete_tail_at_finish", "gpt2", output=_THAI[:1],
         expected=("", ""), differs=DROPPED_INCOMPLETE_TAIL, detok_expected=("", "\ufffd")),
]

# ---- SGLang router ---------------------------------------------------------------------------------
SGL_INTEGRATION = "sglang sgl-router/tests/tokenizer_integration.rs"
SGL_STOP = "sglang sgl-router/src/tokenizer/stop.rs (tests)"
SGL_PROMPTS = ("deep learning is", "Deep learning is", "has anyone seen nemo lately", "another prompt")
SGL_LONG = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex "
    "ea commodo consequat.",
    "Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. "
    "Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est "
    "laborum.",
    "Sed ut perspiciatis unde omnis iste natus error sit voluptatem accusantium doloremque laudantium, totam rem "
    "aperiam, eaque ipsa quae ab illo inventore veritatis et quasi architecto beatae vitae dicta sunt explicabo. "
    "Nemo enim ipsam voluptatem quia voluptas sit aspernatur aut odit aut fugit, sed quia consequuntur magni "
    "dolores eos qui ratione voluptatem sequi nesciunt.",
    "Neque porro quisquam est, qui dolorem ipsum quia dolor sit amet, consectetur, adipisci velit, sed quia non "
    "numquam eius modi tempora incidunt ut labore et dolore magnam aliquam quaerat voluptatem.",
    "In the ancient realm of Tennisia, the very magic of the land is drawn from the sport itself. Forehands light "
    "the skies, backhands carve the earth, and serves rumble like thunder across kingdoms.\n    But the relics "
    "are scattered, guarded by champions of legendary skill — a player of impossible grace, whose game is an art "
    "form.\n    The balance is restored — until the next season begins.",
    "😀😃😄😁😆🥹😅😂🤣🥲☺️😊😇🙂🙃😉🤩😎 🤪🥳🤓🙄🤪😵👻",
)
SGL_CASES = [
    # TinyLlama's tokenizer is Llama-2's SentencePiece vocabulary (llama.cpp's llama-spm file)
    *(Case(SGL_INTEGRATION, f"decode_stream-{k}", "gguf-llama-spm", output=text, params={"skip_special_tokens": False},
           expected=text) for k, text in enumerate(SGL_PROMPTS)),
    *(Case(SGL_INTEGRATION, f"sequence_append_token-{k}", "gguf-llama-spm", output=text, expected=text)
      for k, text in enumerate(SGL_PROMPTS)),
    # the output's dummy-prefix space follows the prompt: SGLang compares output.trim()
    *(Case(SGL_INTEGRATION, f"long_prefill-{k}", "gguf-llama-spm", prompt="Tell me about the following text.",
           output=text, params={"skip_special_tokens": False}, expected=" " + text) for k, text in enumerate(SGL_LONG)),
    Case(SGL_INTEGRATION, "stop_sequence-Stop", "gguf-llama-spm", output="Hello world! Stop here. Continue after.",
         params={"stop": ("Stop",)}, expected="Hello world! ", finish=("stop", "Stop")),
    Case(SGL_INTEGRATION, "stop_sequence-dot", "gguf-llama-spm", output="Testing stop sequences.",
         params={"stop": (".",)}, expected="Testing stop sequences", finish=("stop", ".")),
    Case(SGL_INTEGRATION, "stop_sequence-none", "gguf-llama-spm", output="No stop sequence here",
         params={"stop": ("xyz",)}, expected="No stop sequence here", finish=("length", None)),
    # stop.rs unit tests on SGLang's mock (Hello=1, world=2, test=3, <eos>=999); detok's mock has the
    # same words (Hello=3, world=4, test=5, <eos>=2), skip_special_tokens=False as there
    Case(SGL_STOP, "stop_token_detection", "mock", output=(3, 2, 4), params={"skip_special_tokens": False},
         ignore_eos=False, expected=("Hello", ""), finish=("stop", 2)),
    Case(SGL_STOP, "visible_stop_token", "mock", output=(2,),
         params={"skip_special_tokens": False, "visible_stop_token_ids": (2,)}, expected=("<eos>",), finish=("stop", 2)),
    Case(SGL_STOP, "incremental_decoding_no_repetition", "mock", output=(3, 4, 5),
         params={"skip_special_tokens": False}, expected=("Hello", " world", " test")),
    Case(SGL_STOP, "stop_sequence_detection", "mock", output=(3, 4, 5),
         params={"skip_special_tokens": False, "stop": ("test",)}, expected=("Hello", " world", " "),
         finish=("stop", "test")),
    Case(SGL_STOP, "flush_after_partial", "mock", output=(3,), params={"stop": ("NEVER_MATCH",)},
         expected=("Hello", "")),
    Case(SGL_STOP, "visible_stop_sequence", "mock", output=(3, 4),
         params={"stop": ("world",), "include_stop_str_in_output": True}, expected=("Hello", " world"),
         finish=("stop", "world")),
    Case(SGL_STOP, "multiple_tokens_processing", "mock", output=(3, 4, 5), steps=(3,),
         params={"skip_special_tokens": False}, expected=("Hello world test",)),
]
