"""OpenAI's logprobs shapes from the workers' entries: validated by the `openai` SDK's own pydantic
types, vLLM's choice of alternatives, -inf as -9999.0, OpenAI's text_offset for tokens of one
character, and streamed chunks concatenated == the non-streamed body (hypothesis)."""

from __future__ import annotations

import codecs
import math
import os

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionTokenLogprob
from openai.types.chat.chat_completion import ChoiceLogprobs
from openai.types.chat.chat_completion_chunk import ChoiceLogprobs as ChunkChoiceLogprobs
from openai.types.completion_choice import Logprobs as CompletionChoiceLogprobs

from detok.streaming import logprobs_format as fmt
from detok.streaming.logprobs_format import CompletionOffsets, chat_content, chat_logprobs, completion_logprobs
from detok.receiver.token_logprobs import RawToken, TokenLogprobs
from detok.worker.logprobs import openai_token

EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "60"))


def token(data: bytes) -> str:
    text, raw = openai_token(data)
    return RawToken.parse(text) if raw else text


def entries(rows: list[tuple[int, bytes, float, list[tuple[int, bytes, float]]]], first: int = 0) -> TokenLogprobs:
    """(id, bytes, logprob, [(id, bytes, logprob)]) per token."""
    return TokenLogprobs(
        first, [r[0] for r in rows], [token(r[1]) for r in rows], [r[2] for r in rows], [len(r[3]) for r in rows],
        [a[0] for r in rows for a in r[3]], [token(a[1]) for r in rows for a in r[3]], [a[2] for r in rows for a in r[3]],
    )


SAMPLE = entries([
    (1, b"Hello", -0.1, [(1, b"Hello", -0.1), (2, b"Hi", -2.5), (3, b"Hey", -3.0)]),
    (4, b" \xe5\x8c", -0.7, [(5, b" \xe4", -0.5), (4, b" \xe5\x8c", -0.7), (6, b" x", -1.0)]),  # sampled 2nd
    (7, b"\x97", -0.01, [(7, b"\x97", -0.01)]),
    (8, b"<|im_end|>", float("-inf"), [(9, b"!", -0.2), (10, b".", -0.3), (11, b"?", float("nan"))]),  # not in its tops
])


def encoded(obj: msgspec.Struct) -> bytes:
    return msgspec.json.encode(obj)


def test_chat_shape_validates_with_the_sdk_and_follows_vllm() -> None:
    lp = chat_logprobs(SAMPLE, 2)
    for cls in (ChoiceLogprobs, ChunkChoiceLogprobs):
        parsed = cls.model_validate_json(encoded(lp))
        assert all(isinstance(c, ChatCompletionTokenLogprob) for c in parsed.content)
    c = msgspec.json.decode(encoded(lp))["content"]
    assert [x["token"] for x in c] == ["Hello", "bytes:\\x20\\xe5\\x8c", "bytes:\\x97", "<|im_end|>"]
    assert c[1]["bytes"] == [32, 229, 140] and c[2]["bytes"] == [151]  # a partial token's own bytes
    # vLLM: the sampled token first, then the alternatives without it, top_logprobs in all
    assert [t["token"] for t in c[0]["top_logprobs"]] == ["Hello", "Hi"]
    assert [t["token"] for t in c[1]["top_logprobs"]] == ["bytes:\\x20\\xe5\\x8c", "bytes:\\x20\\xe4"]
    assert [t["token"] for t in c[3]["top_logprobs"]] == ["<|im_end|>", "!"]
    assert c[3]["logprob"] == -9999.0 and c[3]["top_logprobs"][0]["logprob"] == -9999.0  # -inf
    assert [x["top_logprobs"] for x in msgspec.json.decode(encoded(chat_logprobs(SAMPLE, 0)))["content"]] == [[]] * 4
    assert b"".join(bytes(x["bytes"]) for x in c[:3]).decode() == "Hello 北"


def test_completion_shape_validates_with_the_sdk_and_follows_vllm() -> None:
    lp = completion_logprobs(SAMPLE, 1, CompletionOffsets())
    parsed = CompletionChoiceLogprobs.model_validate_json(encoded(lp))
    assert parsed.tokens == ["Hello", "bytes:\\x20\\xe5\\x8c", "bytes:\\x97", "<|im_end|>"]
    assert parsed.token_logprobs == [pytest.approx(-0.1), -0.7, -0.01, -9999.0]
    # vLLM: logprobs + 1 entries, the sampled one first, keyed by token string; NaN -> -9999.0
    assert [list(d) for d in parsed.top_logprobs] == [["Hello", "Hi"], ["bytes:\\x20\\xe5\\x8c", "bytes:\\x20\\xe4"],
                                                     ["bytes:\\x97"], ["<|im_end|>", "!"]]
    assert [len(d) for d in completion_logprobs(SAMPLE, 5, CompletionOffsets()).top_logprobs] == [3, 3, 1, 4]
    assert completion_logprobs(SAMPLE, 5, CompletionOffsets()).top_logprobs[3]["?"] == -9999.0
    # text_offset: " " at 5, 北 (two tokens) at 6 then 7, "<|im_end|>" after it
    assert parsed.text_offset == [0, 5, 6, 7]


def test_text_offset_of_openais_own_example() -> None:
    """gpt-3.5-turbo-instruct, prompt "天气非常好" (5 chars): tokens "，", bytes:\\xe9\\x80,
    bytes:\\x82, "合", "出" had text_offset 5, 6, 6, 7, 8 - the tokens of one character share
    its offset."""
    lp = entries([(1, "，".encode(), -0.8, []), (2, b"\xe9\x80", -2.9, []), (3, b"\x82", -0.01, []),
                  (4, "合".encode(), -0.05, []), (5, "出".encode(), -0.8, [])])
    assert completion_logprobs(lp, 0, CompletionOffsets(5)).text_offset == [5, 6, 6, 7, 8]


# ---- streamed == non-streamed ---------------------------------------------------------------------
_piece = st.one_of(
    st.text(min_size=0, max_size=4).map(str.encode),
    st.binary(min_size=1, max_size=3),  # partial and invalid UTF-8
)
_alt = st.tuples(st.integers(0, 50), _piece, st.floats(-30, 0))
_row = st.tuples(st.integers(0, 50), _piece, st.one_of(st.floats(-30, 0), st.just(float("-inf"))), st.lists(_alt, max_size=6))


@settings(max_examples=EXAMPLES, deadline=None)
@given(rows=st.lists(_row, max_size=25), cuts=st.lists(st.integers(0, 25), max_size=6), k=st.integers(0, 20), n=st.integers(0, 5))
def test_chunks_concatenated_equal_the_body(rows, cuts, k, n) -> None:
    whole = entries(rows)
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    chunks = [whole.tail(a) for a in bounds[:-1]]
    chunks = [TokenLogprobs(c.first, c.token_ids[: b - a], c.tokens[: b - a], c.logprobs[: b - a], c.top_counts[: b - a],
                            c.top_ids[: sum(c.top_counts[: b - a])], c.top_tokens[: sum(c.top_counts[: b - a])],
                            c.top_logprobs[: sum(c.top_counts[: b - a])])
              for c, a, b in zip(chunks, bounds[:-1], bounds[1:])]
    assert sum((chat_content(c, k) for c in chunks), []) == chat_content(whole, k)
    offsets = CompletionOffsets()
    streamed = fmt.CompletionLogprobs([], [], [], [])
    for c in chunks:
        streamed.extend(completion_logprobs(c, n, offsets))
    body = completion_logprobs(whole, n, CompletionOffsets())
    assert streamed == body
    CompletionChoiceLogprobs.model_validate_json(encoded(body))
    ChoiceLogprobs.model_validate_json(encoded(chat_logprobs(whole, k)))
    # the bytes rebuild the text (the worker's text rule: U+FFFD per invalid subpart)
    data = b"".join(bytes(x["bytes"]) for x in msgspec.json.decode(encoded(chat_logprobs(whole, k)))["content"])
    text = codecs.decode(data, "utf-8", "replace")
    assert len(text) == offsets.offset + len(codecs.decode(offsets.pending, "utf-8", "replace"))
    assert all(math.isfinite(x) for x in body.token_logprobs)


def test_bytes_cache_stays_bounded() -> None:
    fmt._bytes_cache.clear()
    for i in range(fmt._BYTES_CACHE_MAX + 10):
        fmt._bytes(f"t{i}")
    assert len(fmt._bytes_cache) <= fmt._BYTES_CACHE_MAX
    raw = RawToken.parse("bytes:\\x74\\x31")  # spelled like no token, but equal to nothing cached
    fmt._bytes("bytes:\\x74\\x31")
    assert fmt._bytes(raw) == [0x74, 0x31] and fmt._bytes("bytes:\\x74\\x31") == list(b"bytes:\\x74\\x31")
