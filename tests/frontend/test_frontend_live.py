"""The HTTP API against a live `detok serve` (frontend, scheduler stub, worker pool in their own
processes), driven by the `openai` SDK: streaming and not, chat and completions, stop strings,
disconnects that abort, bad requests, the API key, health and metrics."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import time
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from detok.tokenizer.default import load_default_tokenizer
from scheduler_stub.workload import embedded_corpus_text
from tests.helpers.serve_helpers import LiveServer, openai_client
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

API_KEY = "sk-detok-test"
MODEL = "detok-stub"


@pytest.fixture(scope="module")
def server():
    # 1 ms steps: a request of N tokens takes at least N ms (the disconnect tests' 4000 take 4 s)
    live = LiveServer("--workers", "2", "--no-spare", "--step-ms", "1", "--api-key", API_KEY, "--max-model-len", "4096")
    try:
        yield live
    finally:
        # `kill PID` (SIGTERM to the main process only): the whole tree must go, cleanly
        code = live.stop(signal.SIGTERM)
        left = live.leftovers()
        live.kill_group()
    assert code == 0, live.output
    assert not left, f"processes left behind: {left}"
    assert "replaying 0 requests" not in live.output  # a normal start is not a warning


KEPT_IDLE_S = 6.0  # longer than uvicorn's default 5 s keep-alive
MAX_IDLE_S = 40.0  # well under the server's 60 s keep-alive


def _health_on(conn: socket.socket) -> bytes:
    """GET /health on an open connection; the whole reply."""
    host, _ = conn.getpeername()
    conn.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply


@pytest.fixture(scope="module", autouse=True)
def idle_connection(server):
    """A connection used once when the module starts, then left idle: the keep-alive test, whenever
    it runs, only waits what the other tests have not already spent of its idle time. Also gives a
    way to open another (used once, idle from now)."""
    url = urlsplit(server.base_url)
    opened: list[socket.socket] = []

    def open_one() -> tuple[socket.socket, bytes, float]:
        opened.append(socket.create_connection((url.hostname, url.port), timeout=30))
        return opened[-1], _health_on(opened[-1]), time.monotonic()

    try:
        yield open_one(), open_one
    finally:
        for conn in opened:
            conn.close()


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server.base_url + "/v1", API_KEY)


@pytest.fixture(scope="module")
def aclient(server):
    return openai_client(server.base_url + "/v1", API_KEY, asynchronous=True)


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def _complete(client, prompt="Once upon a time", **kw):
    return client.completions.create(model=MODEL, prompt=prompt, **kw)


def _stream_completion(client, prompt="Once upon a time", **kw):
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, stream=True, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish, chunks


def _chat(client, content="Hello there", **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kw)


def _stream_chat(client, content="Hello there", **kw):
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content}], stream=True, **kw
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish, chunks


def _metric(server, name: str, **labels: str) -> float:
    """Sum of a metric's samples (over workers) whose labels include `labels`."""
    total = 0.0
    for line in server.get("/metrics").text.splitlines():
        if not line.startswith(name):
            continue
        sample, _, value = line.rpartition(" ")
        if sample.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in sample for k, v in labels.items()):
            total += float(value)
    return total


# ---- basics ------------------------------------------------------------------------------------


def test_health_models_and_metrics(server, client):
    health = server.get("/health")
    assert health.status_code == 200
    assert {k: health.json()[k] for k in ("status", "pool", "scheduler")} == {"status": "ok", "pool": True, "scheduler": True}
    assert [m.id for m in client.models.list().data] == [MODEL]
    _complete(client, max_tokens=3)
    metrics = server.get("/metrics")
    assert metrics.status_code == 200
    for name in ("detok_time_to_first_token_seconds", "detok_e2e_request_latency_seconds", "detok_worker_batch_size"):
        assert name in metrics.text


def test_completion_non_streamed(client, tok):
    result = _complete(client, max_tokens=20)
    choice = result.choices[0]
    assert result.object == "text_completion" and result.model == MODEL and result.id.startswith("cmpl-")
    assert choice.finish_reason == "length" and choice.text
    assert result.usage.completion_tokens == 20
    assert result.usage.prompt_tokens == len(tok.encode("Once upon a time"))
    assert result.usage.total_tokens == result.usage.prompt_tokens + 20


def test_completion_streamed_equals_non_streamed(client):
    for seed in range(4):
        whole = _complete(client, max_tokens=60, seed=seed)
        text, finish, chunks = _stream_completion(
            client, max_tokens=60, seed=seed, stream_options={"include_usage": True}
        )
        assert text == whole.choices[0].text
        assert finish == [whole.choices[0].finish_reason]
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
        assert len([c for c in chunks if c.choices and c.choices[0].text]) > 3  # it really streamed


def test_chat_streamed_equals_non_streamed_and_is_corpus_text(client):
    corpus = embedded_corpus_text()
    for seed in (0, 1, 2):
        whole = _chat(client, seed=seed)
        message = whole.choices[0].message
        assert whole.object == "chat.completion" and message.role == "assistant"
        assert whole.choices[0].finish_reason == "stop"  # the stub's answer ends with EOS
        for paragraph in message.content.split("\n\n"):
            assert paragraph in corpus
        text, finish, chunks = _stream_chat(client, seed=seed)
        assert text == message.content and finish == ["stop"]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)


def test_same_request_same_text_other_seed_other_text(client):
    a = _chat(client, seed=11, max_tokens=30).choices[0].message.content
    assert _chat(client, seed=11, max_tokens=30).choices[0].message.content == a
    assert any(_chat(client, seed=s, max_tokens=30).choices[0].message.content != a for s in (12, 13, 14))


def test_multilingual_text_streams_whole_characters(client):
    # some seed picks a CJK or emoji paragraph; every streamed piece is valid text
    found = False
    for seed in range(12):
        text, _, chunks = _stream_chat(client, seed=seed, max_tokens=80)
        assert "\ufffd" not in text
        cjk = re.search(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", text)
        if cjk and re.search(r"[\U0001F300-\U0001FAFF]", text):
            found = True
            break
    assert found


# ---- stop rules --------------------------------------------------------------------------------


def _long_text(client, seed: int) -> str:
    return _complete(client, max_tokens=120, seed=seed).choices[0].text


@pytest.mark.parametrize("seed", [0, 3, 5])
def test_stop_string_streamed_equals_non_streamed(client, seed):
    text = _long_text(client, seed)
    stop = text[20:24]  # four characters from the middle, wherever token boundaries fall
    cut = text.index(stop)
    whole = _complete(client, max_tokens=120, seed=seed, stop=[stop])
    assert whole.choices[0].text == text[:cut]
    assert whole.choices[0].finish_reason == "stop"
    streamed, finish, _ = _stream_completion(client, max_tokens=120, seed=seed, stop=[stop])
    assert streamed == text[:cut] and finish == ["stop"]
    kept = _complete(client, max_tokens=120, seed=seed, stop=[stop], extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == text[: cut + len(stop)]
    streamed_kept, _, _ = _stream_completion(
        client, max_tokens=120, seed=seed, stop=[stop], extra_body={"include_stop_str_in_output": True}
    )
    assert streamed_kept == text[: cut + len(stop)]


def test_stop_reason_and_earliest_stop_wins(client):
    text = _long_text(client, 7)
    late, early = text[40:43], text[10:13]
    result = _complete(client, max_tokens=120, seed=7, stop=[late, early])
    assert result.choices[0].text == text[: text.index(early)]
    assert result.choices[0].model_extra["stop_reason"] == early


def test_end_of_sequence_has_null_stop_reason(client):
    result = _chat(client, seed=0)  # the stub's answer ends with EOS
    assert result.choices[0].finish_reason == "stop" and result.choices[0].model_extra["stop_reason"] is None


def test_min_tokens_defers_eos(client):
    natural = _chat(client, seed=2)
    n = natural.usage.completion_tokens
    longer = _chat(client, seed=2, extra_body={"min_tokens": n + 10}, max_tokens=n + 200)
    assert longer.usage.completion_tokens >= n + 10
    assert longer.choices[0].message.content.startswith(natural.choices[0].message.content)


def test_ignore_eos_runs_to_max_tokens(client):
    result = _chat(client, seed=2, max_tokens=300, extra_body={"ignore_eos": True})
    assert result.choices[0].finish_reason == "length" and result.usage.completion_tokens == 300


def test_stop_token_ids(client, tok):
    text = _complete(client, max_tokens=40, seed=1).choices[0].text
    ids = tok.encode(text)
    stop_id = ids[10]
    result = _complete(client, max_tokens=40, seed=1, extra_body={"stop_token_ids": [stop_id]})
    assert result.choices[0].finish_reason == "stop"
    assert result.choices[0].model_extra["stop_reason"] == stop_id
    assert result.choices[0].text == tok.decode(ids[: ids.index(stop_id)])


# ---- concurrency -------------------------------------------------------------------------------


def test_concurrent_streams_each_get_their_own_text(aclient):
    seeds = range(24)

    async def whole(seed: int) -> str:
        result = await aclient.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=40, seed=seed)
        return result.choices[0].text

    async def streamed(seed: int) -> str:
        stream = await aclient.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=40, seed=seed,
                                                  stream=True)
        return "".join([c.choices[0].text async for c in stream if c.choices])

    async def main() -> tuple[list[str], list[str]]:
        # all 48 at once: streamed and non-streamed requests share the batches
        results = await asyncio.gather(*(whole(s) for s in seeds), *(streamed(s) for s in seeds))
        return results[: len(seeds)], results[len(seeds) :]

    expected, got = asyncio.run(main())
    assert got == expected and len(set(expected)) > 5


# ---- n > 1, nulls, tools ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_continuous_usage_stats_running_counts_in_every_chunk(client, kind):
    """vLLM's stream_options.continuous_usage_stats (what guidellm sends by default): every chunk
    carries usage with the choice's output tokens so far, rising to the final count; the final
    usage chunk sums the choices."""
    kw = {"n": 2, "seed": 3, "max_tokens": 30,
          "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    _, _, chunks = (_stream_chat if kind == "chat" else _stream_completion)(client, **kw)
    assert all(c.usage is not None for c in chunks)
    prompt = chunks[-1].usage.prompt_tokens
    assert prompt > 0 and all(c.usage.prompt_tokens == prompt for c in chunks)
    assert all(c.usage.total_tokens == prompt + c.usage.completion_tokens for c in chunks)
    for i in (0, 1):
        mine = [c.usage.completion_tokens for c in chunks if c.choices and c.choices[0].index == i]
        assert mine == sorted(mine) and mine[-1] == 30  # running, up to the choice's final count
        if kind == "chat":
            assert mine[0] == 0  # the role chunk, before any token (as vLLM)
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == 60
    # without include_usage it does nothing (as vLLM); a non-boolean is a 400
    _, _, plain = _stream_chat(client, n=1, seed=3, max_tokens=5, stream_options={"continuous_usage_stats": True})
    assert all(c.usage is None for c in plain)
    with pytest.raises(openai.BadRequestError):
        _stream_chat(client, max_tokens=5, stream_options={"include_usage": True, "continuous_usage_stats": "yes"})


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_n_choices_streamed_equal_non_streamed_and_fit_the_sdk_types(client, kind):
    from openai.types import Completion
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    kw = {"n": 2, "seed": 5, "max_tokens": 40}
    if kind == "chat":
        whole = _chat(client, **kw)
        _, _, chunks = _stream_chat(client, stream_options={"include_usage": True}, **kw)
        ChatCompletion.model_validate(whole.model_dump())
        for c in chunks:
            ChatCompletionChunk.model_validate(c.model_dump())
        wanted = {c.index: c.message.content for c in whole.choices}
        got = {i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
               for i in (0, 1)}
    else:
        whole = _complete(client, **kw)
        _, _, chunks = _stream_completion(client, stream_options={"include_usage": True}, **kw)
        # the SDK's Completion type wants a finish_reason, which OpenAI's own text chunks leave null
        for c in [whole, *(c for c in chunks if not c.choices or c.choices[0].finish_reason)]:
            Completion.model_validate(c.model_dump())
        wanted = {c.index: c.text for c in whole.choices}
        got = {i: "".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) for i in (0, 1)}
    assert got == wanted and wanted[0] != wanted[1]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 80  # both choices, summed
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens  # counted once


def test_chat_logprobs_the_same_on_every_chunk_path(client):
    """Chat logprobs rendered by the workers take several paths to a client - the compiled
    pusher's items mode (plain stream), the consumer's joined deltas (stream_interval 3), the
    Python pusher (usage in every chunk), the body - and the entries form with tokens named by id:
    one list of entries on all, by token, logprob, bytes and alternatives."""
    kw = {"seed": 11, "max_tokens": 40, "logprobs": True, "top_logprobs": 4, "temperature": 1.0}

    def streamed(**extra):
        _, _, chunks = _stream_chat(client, **kw, **extra)
        return [e.model_dump() for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]

    body = [e.model_dump() for e in _chat(client, **kw).choices[0].logprobs.content]
    assert len(body) >= 20 and all(len(e["top_logprobs"]) == 4 for e in body)
    assert streamed() == body
    assert streamed(extra_body={"stream_interval": 3}) == body
    assert streamed(stream_options={"include_usage": True, "continuous_usage_stats": True}) == body
    by_id = [e.model_dump() for e in _chat(client, **kw, extra_body={"return_tokens_as_token_ids": True})
             .choices[0].logprobs.content]
    assert [(e["logprob"], e["bytes"]) for e in by_id] == [(e["logprob"], e["bytes"]) for e in body]
    assert [[t["logprob"] for t in e["top_logprobs"]] for e in by_id] == [[t["logprob"] for t in e["top_logprobs"]] for e in body]
    assert all(e["token"].startswith("token_id:") for e in by_id)


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_logprobs_streamed_equal_non_streamed_and_fit_the_sdk_types(client, kind):
    """Logprobs (made in the workers, formatted here) with n=2: every token of each choice has an
    entry, the streamed chunks' entries concatenated equal the body's, the SDK's types accept
    them, and the tokens' bytes rebuild the text."""
    from openai.types import Completion
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    kw = {"n": 2, "seed": 9, "max_tokens": 30}
    if kind == "chat":
        kw |= {"logprobs": True, "top_logprobs": 3}
        whole = _chat(client, **kw)
        _, _, chunks = _stream_chat(client, stream_options={"include_usage": True}, **kw)
        ChatCompletion.model_validate(whole.model_dump())
        for c in chunks:
            ChatCompletionChunk.model_validate(c.model_dump())
        body = {c.index: [e.model_dump() for e in c.logprobs.content] for c in whole.choices}
        streamed = {i: [e.model_dump() for c in chunks if c.choices and c.choices[0].index == i and c.choices[0].logprobs
                        for e in c.choices[0].logprobs.content] for i in (0, 1)}
        for c in whole.choices:
            entries = body[c.index]
            assert all(len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["token"] == e["token"] for e in entries)
            # one entry per output token (a hidden end-of-sequence token's entry adds no text)
            text = b"".join(bytes(e["bytes"]) for e in entries).decode("utf-8", "replace")
            assert text.startswith(c.message.content)
            if c.finish_reason == "length":
                assert len(entries) == 30 and text == c.message.content
    else:
        kw |= {"logprobs": 2}
        whole = _complete(client, **kw)
        _, _, chunks = _stream_completion(client, stream_options={"include_usage": True}, **kw)
        for c in [whole, *(c for c in chunks if not c.choices or c.choices[0].finish_reason)]:
            Completion.model_validate(c.model_dump())
        body = {c.index: c.logprobs.model_dump() for c in whole.choices}
        streamed = {}
        for i in (0, 1):
            parts = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].index == i and c.choices[0].logprobs]
            streamed[i] = {key: [x for p in parts for x in getattr(p, key)] for key in body[i]}
        for c in whole.choices:
            assert len(c.logprobs.tokens) == len(c.logprobs.text_offset) == len(c.logprobs.top_logprobs)
            assert all(len(top) <= 3 for top in c.logprobs.top_logprobs)
    assert streamed == body and body[0] != body[1]


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_return_token_ids_streamed_equal_non_streamed_and_decode_to_the_text(server, tok, kind):
    """vLLM's `return_token_ids` (RL frameworks read the exact tokens through it): the body's
    choice `token_ids` and the prompt's `prompt_token_ids` (chat: top level; completions: in the
    choice), the streamed chunks' ids concatenated equal the body's, they decode to the text, and
    no logprobs are shown when none were asked for."""
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    prompt = {"messages": [{"role": "user", "content": "Once upon a time"}]} if kind == "chat" else {"prompt": "Once upon"}
    body = {"model": MODEL, **prompt, "n": 2, "seed": 5, "max_tokens": 24, "ignore_eos": True, "return_token_ids": True}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http:
        whole = http.post(path, json=body).json()
        raw = http.post(path, json={**body, "stream": True}).text
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    want_prompt = (tok.encode(tok.apply_chat_template(prompt["messages"], add_generation_prompt=True)) if kind == "chat"
                   else tok.encode("Once upon"))
    for choice in whole["choices"]:
        ids = choice["token_ids"]
        text = choice["message"]["content"] if kind == "chat" else choice["text"]
        assert len(ids) == 24 and tok.decode(ids) == text and choice["logprobs"] is None
        streamed = [i for c in chunks for ch in c["choices"] if ch["index"] == choice["index"] for i in ch.get("token_ids", [])]
        assert streamed == ids
        if kind == "completion":
            assert choice["prompt_token_ids"] == want_prompt
            firsts = [ch for c in chunks for ch in c["choices"] if ch["index"] == choice["index"] and "prompt_token_ids" in ch]
            assert [f["prompt_token_ids"] for f in firsts] == [want_prompt]  # (its first chunk only)
    if kind == "chat":
        assert whole["prompt_token_ids"] == want_prompt
        assert [c["prompt_token_ids"] for c in chunks if "prompt_token_ids" in c] == [want_prompt] * 2  # (each role chunk)
    assert all(ch.get("logprobs") is None for c in chunks for ch in c["choices"])
    assert whole["choices"][0]["token_ids"] != whole["choices"][1]["token_ids"]
    # without the field: none of it
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http:
        plain = http.post(path, json={**body, "return_token_ids": False}).json()
    assert "prompt_token_ids" not in plain and all("token_ids" not in c for c in plain["choices"])


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_return_tokens_as_token_ids_names_every_logprob_token_by_its_id(server, kind):
    """vLLM's `return_tokens_as_token_ids`: with logprobs, each token (and alternative) is
    `token_id:{id}`, its `bytes` those of that string, completions' text_offset advancing by its
    length (vLLM's rule); the ids are the ones `return_token_ids` gives."""
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    prompt = {"messages": [{"role": "user", "content": "Once"}]} if kind == "chat" else {"prompt": "Once"}
    lp = {"logprobs": True, "top_logprobs": 2} if kind == "chat" else {"logprobs": 2}
    body = {"model": MODEL, **prompt, **lp, "seed": 8, "max_tokens": 12, "ignore_eos": True,
            "return_tokens_as_token_ids": True, "return_token_ids": True}
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as http:
        choice = http.post(path, json=body).json()["choices"][0]
        plain = http.post(path, json={**body, "return_tokens_as_token_ids": False}).json()["choices"][0]
    named = [f"token_id:{i}" for i in choice["token_ids"]]
    if kind == "chat":
        entries = choice["logprobs"]["content"]
        assert [e["token"] for e in entries] == named
        # the sampled token keeps its own bytes (vLLM's decoded_token), the alternatives the placeholder's
        # (the sampled token listed first among them keeps its own too: a difference, docs/http-api.md)
        assert [e["bytes"] for e in entries] == [e["bytes"] for e in plain["logprobs"]["content"]]
        assert all(t["token"].startswith("token_id:") for e in entries for t in e["top_logprobs"])
        assert all(t["bytes"] == list(t["token"].encode()) for e in entries for t in e["top_logprobs"][1:])
        assert [e["logprob"] for e in entries] == [e["logprob"] for e in plain["logprobs"]["content"]]
    else:
        got = choice["logprobs"]
        assert got["tokens"] == named and all(all(k.startswith("token_id:") for k in top) for top in got["top_logprobs"])
        assert got["text_offset"] == [sum(map(len, named[:i])) for i in range(len(named))]
        assert got["token_logprobs"] == plain["logprobs"]["token_logprobs"]


def test_nulls_are_not_given(client):
    nulls = {k: None for k in ("n", "stream", "min_tokens", "ignore_eos", "logprobs", "echo", "stop", "seed",
                               "include_stop_str_in_output", "skip_special_tokens", "stop_token_ids", "user")}
    assert _complete(client, max_tokens=5, extra_body=nulls).usage.completion_tokens == 5
    chat_nulls = {**nulls, "logprobs": None, "top_logprobs": None, "tools": None, "tool_choice": None,
                  "max_completion_tokens": None, "add_generation_prompt": None, "response_format": None}
    assert _chat(client, max_tokens=5, extra_body=chat_nulls).usage.completion_tokens == 5


def test_tools_are_refused_until_tool_choice_none(client):
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, tools=[tool])
    assert info.value.response.json()["error"]["param"] == "tools"
    assert _chat(client, tools=[tool], tool_choice="none", max_tokens=3).usage.completion_tokens == 3


# ---- disconnects -------------------------------------------------------------------------------


def _wait_for(predicate, timeout: float = 60.0) -> bool:
    return bool(wait_until(predicate, timeout, 0.1))


def test_streaming_disconnect_aborts_in_scheduler_and_worker(server, client):
    aborted = _metric(server, "detok_worker_requests_finished_total", reason="abort")
    counted = _metric(server, "detok_frontend_requests_finished_total", reason="abort")
    stream = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4000, stream=True, extra_body={"ignore_eos": True}
    )
    got = 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].text)
        if got >= 3:
            break
    stream.close()  # the client goes away 3 deltas into a 4 s generation
    assert _wait_for(lambda: _metric(server, "detok_worker_requests_finished_total", reason="abort") >= aborted + 1)
    assert _wait_for(lambda: _metric(server, "detok_worker_live_requests") == 0)
    assert _wait_for(lambda: _metric(server, "detok_frontend_requests_finished_total", reason="abort") >= counted + 1)


def test_non_streaming_disconnect_aborts(server):
    aborted = _metric(server, "detok_worker_requests_finished_total", reason="abort")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 4000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/completions", json=body, timeout=1.0,
                   headers={"Authorization": f"Bearer {API_KEY}"})
    assert _wait_for(lambda: _metric(server, "detok_worker_requests_finished_total", reason="abort") >= aborted + 1)
    assert _wait_for(lambda: _metric(server, "detok_worker_live_requests") == 0)


# ---- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"n": 17}, "n"),
        ({"max_tokens": "ten"}, "max_tokens"),
        ({"max_tokens": 5000}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"extra_body": {"min_tokens": 10}, "max_tokens": 5}, "min_tokens"),
        ({"extra_body": {"stop_token_ids": [10**9]}}, "stop_token_ids"),
        ({"logprobs": 21}, "logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_bad_completion_requests_are_400(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        _complete(client, **kwargs)
    error = info.value.response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_bad_chat_requests_are_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": ["wizard"], "content": "x"}])
    assert info.value.response.json()["error"]["param"] == "messages.0.role"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, content="word " * 5000)  # longer than --max-model-len 4096
    assert info.value.response.json()["error"]["code"] == "context_length_exceeded"


def test_malformed_body_is_400(server):
    r = httpx.post(server.base_url + "/v1/completions", content=b"{not json", timeout=10,
                   headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error" and "JSON" in r.json()["error"]["message"]


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="gpt-4", prompt="x")
    assert info.value.response.json()["error"]["code"] == "model_not_found"


def test_api_key_is_required_on_v1_only(server):
    bad = openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    r = httpx.post(server.base_url + "/v1/completions", json={"model": MODEL, "prompt": "x"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert server.get("/health").status_code == 200
    assert server.get("/metrics").status_code == 200


def test_unknown_route_is_openai_shaped_404(server):
    r = server.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


# ---- last in the file: (unshuffled) it then waits nothing of its idle time -------------------


def test_an_idle_kept_alive_connection_outlives_uvicorns_5_s(idle_connection):
    """--timeout-keep-alive (default 60 s): a connection idle for longer than uvicorn's 5 s still
    serves the next request (a client pool reusing it does not race the server's close)."""
    (conn, first, idle_since), open_one = idle_connection
    if time.monotonic() - idle_since > MAX_IDLE_S:  # a slow box: too near the server's own 60 s, start again
        conn, first, idle_since = open_one()
    time.sleep(max(0.0, idle_since + KEPT_IDLE_S - time.monotonic()))  # what the other tests left of it
    assert time.monotonic() - idle_since >= KEPT_IDLE_S
    replies = [first, _health_on(conn)]  # on the same connection both times
    assert all(r.startswith(b"HTTP/1.1 200") for r in replies), replies
