"""The benchmark anchors (bench/baselines*.py) are working detokenizers, and bench/decode.py runs.

Anchors are checked against the oracle of docs/tokenizers.md, D(C + G)[len(D(C)):], on clean text with the
Qwen2 fixture; where an anchor's published behaviour differs (SGLang showing only whole words of an
unsettled tail, vLLM's DecodeStream dropping an incomplete tail at finish), the test pins that.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import tokenizers
import zmq

from tests.helpers.tokenizers_available import corpus_text, hf_qwen2_dir

REPO = Path(__file__).resolve().parents[2]

from bench import _common  # noqa: E402
from bench.baselines import (  # noqa: E402
    ANCHORS,
    HFDecodeStream,
    NaiveRedecode,
    SGLangDetokenizer,
    SGLangIncremental,
    WindowDiff,
    find_printable_text,
    run_hf_decodestream_worker,
    run_sglang_style_worker,
)

CLEAN_TEXTS = [
    corpus_text()[5000:7000],
    "北京欢迎你！今天天气很好。東京の桜は美しいです。서울은 한국의 수도입니다.",
    "Family 👩‍👩‍👧‍👦, flag 🏳️‍🌈, thumbs 👍🏽, shaking 🫨. สวัสดีครับ مرحبا بالعالم नमस्ते",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\t# done\n",
]


@pytest.fixture(scope="module")
def qwen2() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(hf_qwen2_dir() / "tokenizer.json"))


def _context(tok: tokenizers.Tokenizer) -> list[int]:
    return tok.encode("You are a helpful assistant. Answer:").ids[-5:]


def _oracle(tok: tokenizers.Tokenizer, context: list[int], ids: list[int]) -> str:
    d = lambda x: tok.decode(x, skip_special_tokens=True)  # noqa: E731
    return d(context + ids)[len(d(context)) :]


def _run(anchor: object, ids: list[int], chunk: int) -> str:
    parts = [anchor.step(ids[i : i + chunk]) for i in range(0, len(ids), chunk)]  # type: ignore[attr-defined]
    return "".join(parts) + anchor.flush()  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(ANCHORS))
@pytest.mark.parametrize("chunk", [1, 3])
def test_anchor_reproduces_full_decode_on_clean_text(qwen2: tokenizers.Tokenizer, name: str, chunk: int) -> None:
    context = _context(qwen2)
    for text in CLEAN_TEXTS:
        ids = qwen2.encode(text).ids
        assert len(ids) > 10
        got = _run(ANCHORS[name](qwen2, context, True), ids, chunk)
        assert got == _oracle(qwen2, context, ids), (name, text[:30])


def test_multi_token_emoji_appears_at_its_last_token(qwen2: tokenizers.Tokenizer) -> None:
    ids = qwen2.encode(" 🫨").ids
    assert len(ids) >= 2  # split over byte-level tokens
    for cls in (NaiveRedecode, WindowDiff, HFDecodeStream):
        anchor = cls(qwen2, _context(qwen2), True)
        steps = [anchor.step([i]) for i in ids]
        assert steps[:-1] == [""] * (len(ids) - 1), cls.__name__
        assert steps[-1] == " 🫨", cls.__name__


def test_special_tokens_decode_to_nothing_and_window_waits_for_text(qwen2: tokenizers.Tokenizer) -> None:
    eos = qwen2.token_to_id("<|endoftext|>")
    words = qwen2.encode(" alpha beta").ids
    ids = [eos, eos, eos, *words, eos]
    for name, cls in ANCHORS.items():
        assert _run(cls(qwen2, _context(qwen2), True), ids, 1) == " alpha beta", name
    window = WindowDiff(qwen2, [], True)
    assert [window.step([i]) for i in (eos, eos, words[0])] == ["", "", " alpha"]


def test_find_printable_text_follows_sglang() -> None:
    assert find_printable_text("hello wor") == "hello "
    assert find_printable_text("no space") == "no "
    assert find_printable_text("word") == ""
    assert find_printable_text("line\n") == "line\n"
    assert find_printable_text("你好") == "你好"
    assert find_printable_text("你好x") == "你好"
    assert find_printable_text("ab \ufffd") == "ab "


def test_sglang_shows_only_whole_words_of_an_unsettled_tail(qwen2: tokenizers.Tokenizer) -> None:
    # SGLang's published behaviour (not the oracle's): while the new text ends in U+FFFD, only the
    # part up to the last space is shown; the rest comes when the character completes.
    head = qwen2.encode(" hello wor").ids
    char = qwen2.encode("北").ids
    assert len(qwen2.encode("北").ids) == 1
    raw = [i for i in qwen2.encode("\U0001fae8").ids]
    assert len(raw) >= 2
    anchor = SGLangIncremental(qwen2, [], True)
    assert anchor.step(head + raw[:1]) == " hello "
    assert anchor.step(raw[1:]) == "wor\U0001fae8"
    assert anchor.step(char) == "北"
    assert anchor.flush() == ""


def test_sglang_batches_requests_independently(qwen2: tokenizers.Tokenizer) -> None:
    texts = CLEAN_TEXTS[1:]
    ids = [qwen2.encode(t).ids for t in texts]
    context = _context(qwen2)
    manager = SGLangDetokenizer(qwen2, skip_special_tokens=True)
    rids = [f"r{k}" for k in range(len(texts))]
    out = [""] * len(texts)
    longest = max(len(x) for x in ids)
    for t in range(longest):
        # requests of different lengths: a request leaves the batch when its ids run out
        live = [k for k in range(len(texts)) if t < len(ids[k])]
        lists = [(context if t == 0 else []) + [ids[k][t]] for k in live]
        finished = [t == len(ids[k]) - 1 for k in live]
        context_lens = [len(context) if t == 0 else 0] * len(live)
        got = manager.step_batch([rids[k] for k in live], lists, finished, context_lens)
        for k, text in zip(live, got):
            out[k] += text
    assert out == [_oracle(qwen2, context, x) for x in ids]
    assert len(manager) == 0  # finished requests are dropped


def test_hf_decodestream_drops_an_incomplete_tail_like_vllm(qwen2: tokenizers.Tokenizer) -> None:
    ids = qwen2.encode(" ok \U0001fae8").ids
    cut = ids[:-1]  # ends inside the emoji
    assert _oracle(qwen2, [], cut) == " ok \ufffd"  # the space shares a token with the emoji's first bytes
    assert _run(HFDecodeStream(qwen2, [], True), cut, 1) == " ok"
    assert _run(WindowDiff(qwen2, [], True), cut, 1) == _oracle(qwen2, [], cut)


# ---- pipeline workers: real processes, real sockets ------------------------------------------------
def _drive_worker(target: Callable[..., None], requests: dict[str, list[int]], context: list[int]) -> dict[str, str]:
    zctx = zmq.Context()
    push, pull = zctx.socket(zmq.PUSH), zctx.socket(zmq.PULL)
    for s in (push, pull):
        s.setsockopt(zmq.LINGER, 0)
    in_port = push.bind_to_random_port("tcp://127.0.0.1")
    out_port = pull.bind_to_random_port("tcp://127.0.0.1")
    proc = multiprocessing.get_context("spawn").Process(
        target=target, args=((f"tcp://127.0.0.1:{in_port}", f"tcp://127.0.0.1:{out_port}"), str(hf_qwen2_dir()))
    )
    proc.start()
    try:
        assert pull.poll(60_000), "worker never became ready"
        ready = pickle.loads(pull.recv())
        assert ready[0] == "ready" and ready[1] == proc.pid
        rids = list(requests)
        texts = dict.fromkeys(rids, "")
        for t in range(max(len(v) for v in requests.values())):
            live = [r for r in rids if t < len(requests[r])]
            lists = [(context if t == 0 else []) + [requests[r][t]] for r in live]
            finished = [t == len(requests[r]) - 1 for r in live]
            push.send(pickle.dumps((time.time(), live, lists, finished, [len(context) if t == 0 else 0] * len(live))))
            assert pull.poll(10_000), "worker did not answer"
            sent, got_rids, got_texts, got_finished = pickle.loads(pull.recv())
            assert got_rids == live and got_finished == finished
            for r, text in zip(got_rids, got_texts):
                texts[r] += text
        push.send(pickle.dumps(None))
        proc.join(10)
        assert proc.exitcode == 0
        return texts
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        push.close()
        pull.close()
        zctx.term()


@pytest.mark.parametrize("target", [run_sglang_style_worker, run_hf_decodestream_worker])
def test_pipeline_worker_streams_each_request(qwen2: tokenizers.Tokenizer, target: Callable[..., None]) -> None:
    context = _context(qwen2)
    requests = {f"req-{k}": qwen2.encode(text).ids[:80] for k, text in enumerate(CLEAN_TEXTS)}
    texts = _drive_worker(target, requests, context)
    assert texts == {r: _oracle(qwen2, context, ids) for r, ids in requests.items()}


# ---- token streams and the decode benchmark ------------------------------------------------------------
def test_bench_streams_are_exact_and_cut_on_whole_characters() -> None:
    import detok

    tok = detok.load_tokenizer(str(hf_qwen2_dir()))
    streams = _common.make_streams(tok, 200, len(_common.STREAM_KINDS), seed=1)
    assert [s.kind for s in streams] == list(_common.STREAM_KINDS)
    assert all(len(s.ids) == 200 and 0 < len(s.context) <= 5 for s in streams)
    for s in streams:
        if s.kind in ("corpus", "multilingual"):
            assert "\ufffd" not in _common.oracle_text(tok, s), s.kind
    byte_run = next(s for s in streams if s.kind == "byte-runs")
    byte_ids = set(_common._byte_token_ids(tok).values())
    assert sum(i in byte_ids for i in byte_run.ids) > 100
    empty_run = next(s for s in streams if s.kind == "empty-runs")
    assert sum(i in tok.special_ids for i in empty_run.ids) > 10
    again = _common.make_streams(tok, 200, len(_common.STREAM_KINDS), seed=1)
    assert [s.ids for s in again] == [s.ids for s in streams]
    # byte-level BPE decodes invalid bytes the §3 way (lossy UTF-8), so both oracles agree here,
    # on streams that do hold invalid and incomplete bytes
    oracle = _common.Oracle(tok)
    assert [oracle.text(s) for s in streams] == [_common.oracle_text(tok, s) for s in streams]
    assert any("\ufffd" in oracle.text(s) for s in streams if s.kind in ("random", "byte-runs"))


def test_decode_bench_smoke_prints_json_lines() -> None:
    import detok

    try:
        detok.DecodeStream  # noqa: B018
    except (AttributeError, ImportError):
        pytest.skip("detok.DecodeStream does not exist yet")
    cmd = [sys.executable, "bench/decode.py", "--tokens", "64", "--streams", "2", "--json"]
    cmd += ["--tokenizer", "tests/fixtures/hf/qwen2"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    impls = {r["impl"] for r in records}
    assert {"detok", "naive", "window", "sglang", "hf-decodestream"} <= impls
    if importlib.util.find_spec("detok.stream.table") is not None:
        assert "detok-batch" in impls
    for r in records:
        assert r["bench"] == "decode" and r["tokenizer"] == "tests/fixtures/hf/qwen2"
        assert r["ns_per_token"] > 0 and isinstance(r["mismatches"], int)
    detok_line = next(r for r in records if r["impl"] == "detok")
    assert detok_line["ratio_vs_detok"] == 1.0 and detok_line["mismatches"] == 0


def test_decode_bench_per_request_smoke() -> None:
    """--per-request: streams created on the clock, one record per implementation and length,
    ratios against HF DecodeStream, detok paths exact."""
    cmd = [sys.executable, "bench/decode.py", "--per-request", "--per-request-tokens", "4,16", "--streams", "3",
           "--repeats", "1", "--json", "--tokenizer", "tests/fixtures/hf/qwen2"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert {(r["impl"], r["tokens_per_stream"]) for r in records} == {
        (impl, n) for impl in ("detok", "detok-int", "detok-init", "detok-batch+split", "detok-batch+str",
                               "hf-decodestream")
        for n in (4, 16)}
    for r in records:
        assert r["bench"] == "decode-per-request" and r["ns_per_token"] > 0
        if r["impl"].startswith("detok"):
            assert r["mismatches"] == 0
        else:
            assert r["x_vs_hf"] == 1.0


@pytest.mark.parametrize("mode", ["table", "streams", "batch-cold"])
def test_table_requests_bench_smoke(mode: str) -> None:
    """bench/table_requests.py (and its --streams and --batch --cold forms): one JSON line per
    parameter set, every figure measured."""
    extra = {"table": [], "streams": ["--streams"], "batch-cold": ["--batch", "--cold"]}[mode]
    cmd = [sys.executable, "bench/table_requests.py", "--requests", "5", "--tokens", "4", "--repeats", "1", "--json",
           "--no-progress", "--tokenizer", "tests/fixtures/hf/qwen2", *extra]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert [r["params"] for r in records] == ["none", "stop id (end-of-sequence)", "stop id (in the text)", "min_tokens=4",
                                             "two stop strings", "stop string ###"]
    bench = "stream-requests" if mode == "streams" else "table-requests"
    assert all(r["bench"] == bench and r["open_ns"] > 0 and r["finish_ns"] > 0 for r in records)


def test_frontend_cpu_runs_each_variant_from_its_own_tree(tmp_path: Path) -> None:
    """`python -m` puts the working directory first on sys.path: a 'before' tree on PYTHONPATH
    alone loses to this tree when run from its root, so bench/frontend_cpu.py runs each variant
    in its own tree and checks where detok comes from."""
    from bench.frontend_cpu import _REPO, detok_source

    (tmp_path / "detok").mkdir()
    (tmp_path / "detok" / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    assert detok_source(env, str(tmp_path)) == os.path.realpath(tmp_path)
    assert detok_source(env, _REPO) == os.path.realpath(_REPO)  # (the trap the bench avoids)


def test_frontend_cpu_sets_each_trees_frontends_and_refuses_them_in_serve_args() -> None:
    """`--serve-arg=--frontends=2` reached the 'before' runs and was overridden by the 'after' runs'
    own `--frontends 1`: a comparison of 2 frontends against 1, labelled as like for like."""
    from bench.frontend_cpu import main, serve_extras

    assert serve_extras("before", 1, ["--x"]) == []
    assert serve_extras("before", 2, ["--x"]) == ["--frontends", "2"]
    assert serve_extras("after", 2, ["--x"]) == ["--frontends", "2", "--x"]
    for bad in (["--serve-arg=--frontends=2"], ["--after-arg=--frontends=2"], ["--serve-arg", "--frontends"]):
        with pytest.raises(SystemExit) as refused:
            main(bad)
        assert refused.value.code == 2


def test_decode_bench_compares_the_batched_strs_with_and_without_the_blob_on_request() -> None:
    """--impl detok-batch+str+blob (the step's form before `packed_text`: strs and the packed blob)
    runs beside detok-batch+str when named, exact as it; the default set leaves it out."""
    cmd = [sys.executable, "bench/decode.py", "--per-request", "--per-request-tokens", "4", "--streams", "3",
           "--repeats", "1", "--json", "--tokenizer", "tests/fixtures/hf/qwen2", "--impl", "detok-batch+str",
           "--impl", "detok-batch+str+blob"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {r["impl"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert {"detok-batch+str", "detok-batch+str+blob", "hf-decodestream"} <= set(records)
    assert records["detok-batch+str"]["mismatches"] == records["detok-batch+str+blob"]["mismatches"] == 0
