"""Streamed chunks from byte templates (`detok.streaming.chunks`) and `stream_interval`: the bytes
equal the OpenAI Structs' encoding, and joined chunks carry the same text and logprobs."""

from __future__ import annotations

import asyncio
import json

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from detok.streaming.chunks import ChunkRenderer
from detok.streaming.logprobs_format import CompletionOffsets, chat_logprobs, completion_logprobs
from detok.api.openai_types import ChatChunkChoice, ChatCompletionChunk, ChatDelta, Completion, CompletionChoice
from detok.api.responses import ResponseContext, stream_events
from detok.receiver.receiver import RequestDelta
from detok.receiver.token_logprobs import TokenLogprobs
from detok.wire.params import Finish

_texts = st.text(st.characters(codec="utf-8"), max_size=20)


def _run(first: int, tokens: list[str]) -> TokenLogprobs:
    n = len(tokens)
    return TokenLogprobs(first, list(range(first, first + n)), tokens, [-0.5 * (i + 1) for i in range(n)],
                         [1] * n, [7] * n, ["alt"] * n, [-2.0] * n)


@settings(max_examples=200, deadline=None)
@given(text=_texts, rid=_texts, model=_texts, index=st.integers(0, 3), with_logprobs=st.booleans())
def test_template_bytes_equal_struct_encoding(text: str, rid: str, model: str, index: int, with_logprobs: bool):
    render_chat = ChunkRenderer("chat", rid, 1700000000, model, choices=4)
    render_text = ChunkRenderer("completion", rid, 1700000000, model, choices=4)
    entries = _run(0, ["a", "b"]) if with_logprobs else None
    chat_lp = chat_logprobs(entries, 1) if entries else None
    text_lp = completion_logprobs(entries, 1, CompletionOffsets(0)) if entries else None
    chat = ChatCompletionChunk(rid, 1700000000, model, [ChatChunkChoice(index, ChatDelta(content=text), logprobs=chat_lp)])
    comp = Completion(rid, 1700000000, model, [CompletionChoice(index, text, None, logprobs=text_lp)])
    assert render_chat.text(index, text, chat_lp) == b"data: " + msgspec.json.encode(chat) + b"\n\n"
    assert render_text.text(index, text, text_lp) == b"data: " + msgspec.json.encode(comp) + b"\n\n"


def test_extra_delta_fields_follow_content():
    chunk = ChunkRenderer("chat", "x", 1, "m").text(0, "hi", extra={"reasoning_content": "why"})
    delta = json.loads(chunk[6:-2])["choices"][0]["delta"]
    assert list(delta.items()) == [("content", "hi"), ("reasoning_content", "why")]


class _Stream:
    def __init__(self, deltas: list[RequestDelta]) -> None:
        self._deltas, self.rid = list(deltas), 1

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestDelta:
        if not self._deltas:
            raise StopAsyncIteration
        return self._deltas.pop(0)


def _events(kind: str, deltas: list[RequestDelta], interval: int) -> list[dict]:
    ctx = ResponseContext(kind, "id", "m", 3, False, 0.0, logprobs=1, stream_interval=interval)  # type: ignore[arg-type]

    async def collect() -> list[dict]:
        chunks = [c async for c in stream_events(ctx, [_Stream(deltas)], None)]
        events = [e[6:] for c in chunks for e in c.split(b"\n\n")[:-1]]  # (the last chunk: finish and [DONE])
        return [json.loads(e) for e in events if e != b"[DONE]"]

    return asyncio.run(collect())


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(_texts, min_size=1, max_size=12), interval=st.integers(1, 5),
       kind=st.sampled_from(["chat", "completion"]))
def test_stream_interval_joins_text_and_logprobs(texts: list[str], interval: int, kind: str):
    deltas = [RequestDelta(t, num_tokens=i + 1, logprobs=_run(i, [f"t{i}"])) for i, t in enumerate(texts)]
    deltas[-1] = deltas[-1]._replace(finish=Finish("length", None))
    one, joined = _events(kind, deltas, 1), _events(kind, deltas, interval)

    def content(events: list[dict]) -> tuple[str, list]:
        choices = [e["choices"][0] for e in events if e["choices"]]
        text = "".join(c["delta"].get("content") or "" if kind == "chat" else c["text"] for c in choices)
        lps = [c["logprobs"] for c in choices if c.get("logprobs")]
        if kind == "chat":
            return text, [item for lp in lps for item in lp["content"]]
        return text, [tok for lp in lps for tok in zip(lp["tokens"], lp["token_logprobs"], lp["text_offset"])]

    assert content(joined) == content(one) == ("".join(texts), content(one)[1])
    assert len(content(one)[1]) == len(texts)
    # the first delta alone, then at most one chunk per `interval` deltas (+ the finish chunk)
    text_chunks = sum(1 for e in joined if e["choices"] and e["choices"][0].get("finish_reason") is None) - (kind == "chat")
    assert text_chunks <= 1 + -(-(len(texts) - 1) // interval)


def _chunk_texts(events: list[dict]) -> list[str]:
    return [e["choices"][0]["delta"].get("content") or "" for e in events
            if e["choices"] and e["choices"][0]["delta"].get("role") is None]


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.integers(1, 4), min_size=1, max_size=12), interval=st.integers(2, 6))
def test_stream_interval_counts_output_tokens_as_vllm(steps: list[int], interval: int):
    # vLLM's RequestState.make_request_output: the first output at once, then a chunk once
    # `interval` tokens arrived since the last one sent (a step of several tokens counts as that
    # many), and the finish at once
    totals = [sum(steps[: i + 1]) for i in range(len(steps))]
    deltas = [RequestDelta(f"<{n}>", num_tokens=n) for n in totals]
    deltas[-1] = deltas[-1]._replace(finish=Finish("length", None))
    want, group, sent = [], [], None
    for i, n in enumerate(totals):
        group.append(f"<{n}>")
        if sent is None or n - sent >= interval or i == len(totals) - 1:
            want.append("".join(group))
            group, sent = [], n
    got = [t for t in _chunk_texts(_events("chat", deltas, interval)) if t]
    assert got == want
