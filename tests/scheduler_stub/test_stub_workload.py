"""The stub's workloads and per-request generation rules, on the real qwen2 tokenizer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from detok.tokenizer.default import load_default_tokenizer
from detok.wire.to_scheduler import GenerateRequest
from detok.wire.params import DecodeParams
from scheduler_stub.generation import RequestGeneration
from scheduler_stub.workload import (
    END,
    CorpusWorkload,
    RandomIdsWorkload,
    TraceWorkload,
    embedded_corpus_text,
    make_workload,
    request_hash,
)


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


@pytest.fixture(scope="module")
def corpus(tok):
    return CorpusWorkload(tok, embedded_corpus_text())


def _take(it, n):
    return list(itertools.islice(it, n))


def _request(prompt=(1, 2, 3), max_tokens=10_000, seed=0, ignore_eos=False, **params) -> GenerateRequest:
    return GenerateRequest(
        rid=7, prompt_ids=list(prompt), params=DecodeParams(**params), max_tokens=max_tokens,
        reply_to="ipc:///nowhere", seed=seed, ignore_eos=ignore_eos,
    )


def _run(gen: RequestGeneration, per_step: int = 1):
    tokens, end = [], None
    while end is None:
        got, end = gen.next_tokens(per_step)
        tokens += got
    return tokens, end


def test_request_hash_is_stable_and_depends_on_prompt_and_seed():
    assert request_hash([1, 2, 3], 0) == request_hash([1, 2, 3], 0)
    assert request_hash([1, 2, 3], 0) != request_hash([1, 2, 3], 1)
    assert request_hash([1, 2, 3], 0) != request_hash([1, 2, 4], 0)
    assert request_hash([12, 3], 0) != request_hash([1, 23], 0)


def test_corpus_answer_is_readable_multilingual_text_ending_in_end(tok, corpus):
    texts = set()
    for seed in range(12):
        ids = list(itertools.takewhile(lambda t: t != END, corpus.tokens([5, 6], seed)))
        text = tok.decode(ids)
        assert text.strip() and "\ufffd" not in text
        texts.add(text)
    assert len(texts) > 3  # different seeds pick different paragraphs
    joined = "".join(texts)
    assert any("\u4e00" <= c <= "\u9fff" for c in joined)  # CJK
    assert any(ord(c) > 0x1F000 for c in joined)  # emoji


def test_corpus_answer_is_paragraphs_of_the_text(tok, corpus):
    corpus_text = embedded_corpus_text()
    for seed in range(8):
        ids = list(itertools.takewhile(lambda t: t != END, corpus.tokens([9], seed)))
        for paragraph in tok.decode(ids).split("\n\n"):
            assert paragraph in corpus_text


def test_corpus_is_deterministic(corpus):
    assert _take(corpus.tokens([1, 2], 3), 300) == _take(corpus.tokens([1, 2], 3), 300)


def test_corpus_continues_past_end(corpus):
    ids = _take(corpus.tokens([1], 0), 2000)
    assert ids.count(END) >= 2  # the stream never runs dry (ignore_eos requests keep going)


def test_random_ids_are_valid_non_special_and_deterministic(tok):
    w = RandomIdsWorkload(tok)
    ids = _take(w.tokens([1], 0), 500)
    assert ids == _take(w.tokens([1], 0), 500)
    assert ids != _take(w.tokens([1], 1), 500)
    assert all(0 <= i < tok.vocab_size and i not in tok.special_ids for i in ids)
    assert END not in ids
    ended = _take(RandomIdsWorkload(tok, end_probability=0.2).tokens([1], 0), 200)
    assert 10 < ended.count(END) < 80


def test_trace_replays_sequences(tmp_path: Path, tok):
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps([10, 11, 12]) + "\n\n" + json.dumps({"output_ids": [20, 21]}) + "\n")
    w = TraceWorkload(path, tok.vocab_size)
    seen = set()
    for seed in range(20):
        seq = tuple(itertools.takewhile(lambda t: t != END, w.tokens([1], seed)))
        seen.add(seq)
    assert seen == {(10, 11, 12), (20, 21)}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]\nnot json\n", ":2: not JSON"),
        ('{"tokens": []}\n', "non-empty list"),
        ("[1, 99999999]\n", "token id 99999999 is outside the vocabulary"),
        ("\n", "holds no sequence"),
    ],
)
def test_trace_rejects_bad_files(tmp_path: Path, tok, content, message):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        TraceWorkload(path, tok.vocab_size)


def test_make_workload_specs(tmp_path: Path, tok):
    assert make_workload("corpus", tok).name == "corpus"
    assert make_workload("random", tok).name == "random"
    (tmp_path / "c.txt").write_text("one two\n\nthree four\n")
    assert make_workload(f"corpus:{tmp_path / 'c.txt'}", tok).name == "corpus"
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("bogus", tok)
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("trace", tok)


def test_generation_ends_on_eos_with_the_eos_token(tok, corpus):
    gen = RequestGeneration(_request(), corpus, tok.eos_token_ids)
    tokens, end = _run(gen)
    eos = min(tok.eos_token_ids)
    assert end.reason == "stop" and end.matched == eos and tokens[-1] == eos
    assert eos not in tokens[:-1]
    assert gen.generated == len(tokens)


def test_generation_ends_on_length(tok, corpus):
    tokens, end = _run(RequestGeneration(_request(max_tokens=5), corpus, tok.eos_token_ids))
    assert len(tokens) == 5 and end.reason == "length"


def test_ignore_eos_runs_to_length(tok, corpus):
    tokens, end = _run(RequestGeneration(_request(max_tokens=600, ignore_eos=True), corpus, tok.eos_token_ids))
    assert len(tokens) == 600 and end.reason == "length"
    assert not set(tokens) & tok.eos_token_ids


def test_min_tokens_keeps_eos_away(tok, corpus):
    natural, _ = _run(RequestGeneration(_request(), corpus, tok.eos_token_ids))
    longer, end = _run(RequestGeneration(_request(min_tokens=len(natural) + 20), corpus, tok.eos_token_ids))
    assert len(longer) > len(natural) + 20 and end.reason == "stop"
    assert longer[: len(natural) - 1] == natural[:-1]  # same text, the EOS was skipped


def test_stop_token_id_ends_request(tok, corpus):
    natural, _ = _run(RequestGeneration(_request(), corpus, tok.eos_token_ids))
    stop_id = natural[4]
    tokens, end = _run(RequestGeneration(_request(stop_token_ids=(stop_id,)), corpus, tok.eos_token_ids))
    assert tokens == natural[: natural.index(stop_id) + 1]
    assert end.reason == "stop" and end.matched == stop_id


def test_several_tokens_per_step_give_the_same_tokens(tok, corpus):
    one, end1 = _run(RequestGeneration(_request(max_tokens=37), corpus, tok.eos_token_ids), 1)
    four, end4 = _run(RequestGeneration(_request(max_tokens=37), corpus, tok.eos_token_ids), 4)
    assert one == four and end1 == end4


def test_a_request_that_runs_out_of_text_ends_on_the_primary_eos_id(tok, corpus) -> None:
    """The stub ends on the tokenizer's own eos token (vLLM's `stop_reason: null` case), not on
    whichever of several end-of-sequence ids is smallest."""
    from scheduler_stub.generation import primary_eos_id

    primary = primary_eos_id(tok)
    assert primary is not None and primary == tok.token_to_id(tok.special_tokens.eos)
    eos_ids = tok.eos_token_ids | {5}  # e.g. generation_config's extra end ids, one smaller
    tokens, end = _run(RequestGeneration(_request(), corpus, eos_ids, primary))
    assert end is not None and end.reason == "stop" and end.matched == primary == tokens[-1]
