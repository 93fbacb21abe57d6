"""Logprob entries made by the worker (WorkerCore in-process): token strings as vLLM / OpenAI give
them, which tokens get entries (stop strings, EOS, stop ids, late tokens), replays and gaps,
multi-byte characters split across tokens, several frontends, malformed columns; compiled and
numpy paths alike."""

from __future__ import annotations

import codecs
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detok
from detok.wire.packing import pack_u32
from detok.wire.to_workers import EndRequest, MAX_TOP_LOGPROBS, Registration, StepLogprobs
from detok.wire.params import DecodeParams
from detok.stream.strategy import prepare_decoding
from detok.worker.core import MalformedBatch, WorkerCore
from detok.worker.logprobs import TokenStrings, openai_token
from scheduler_stub.logprobs import token_logprobs
from tests.helpers.logprob_helpers import EntryCollector, lp_batch
from tests.helpers.tokenizers_available import gguf_fixture

FE, FE2 = "ipc:///tmp/detok-test/lp0", "ipc:///tmp/detok-test/lp1"
EXAMPLES = int(os.environ.get("DETOK_EXAMPLES", "40"))  # DETOK_SLOW=1 raises it
TEXT = "Hello, world! 北京欢迎你 🫨👍🏽 def f(x):\n    return x ** 2\nÀ la carte — «quotes» नमस्ते. "


@pytest.fixture(params=["compiled", "numpy"])
def core_of(request):
    def make(tok: detok.Tokenizer) -> WorkerCore:
        core = WorkerCore(tok)
        if request.param == "numpy":
            core.table.compiled = False
        elif not core.table.compiled:
            pytest.skip("the compiled step is not built")
        return core

    return make


def reg(rid: int, k: int | None, reply_to: str = FE, **params) -> Registration:
    return Registration(rid, reply_to, [], DecodeParams(**params), logprobs=k)


def expected_top(rid: int, pos: int, token: int, k: int, sent: int, tok) -> tuple[float, list[int]]:
    lp, ids, _ = token_logprobs(rid, pos, token, sent, tok.vocab_size)
    return lp, ids[:k]


def run_steps(core: WorkerCore, rid: int, ids: list[int], *, k: int = 3, sent: int = 5, per_step: int = 1, **params):
    """Register `rid` (with `k` alternatives) and step `ids` `per_step` at a time, logprobs for
    every row; ends with "length" unless the request finished itself."""
    col = EntryCollector()
    tok = core.tokenizer
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(rid, k, **params)])))
    for start in range(0, len(ids), per_step):
        chunk = ids[start : start + per_step]
        col.take(core.handle_batch(lp_batch([rid], [start], chunk, [len(chunk)], sent_k={rid: sent}, vocab=tok.vocab_size)))
    col.take(core.handle_batch(lp_batch([], [], [], ends=[EndRequest(rid, "length")])))
    return col


# ---- token strings -----------------------------------------------------------------------------
def test_openai_token_form() -> None:
    assert openai_token(" hi".encode()) == (" hi", False)
    assert openai_token("北".encode()) == ("北", False)
    assert openai_token(b"\xe5\x8c") == ("bytes:\\xe5\\x8c", True)
    assert openai_token(b" \xf0") == ("bytes:\\x20\\xf0", True)  # every byte of a partial token named
    assert openai_token(b"") == ("", False)


@pytest.mark.parametrize("source", ["qwen2", "llama-spm", "bert-bge"])
def test_token_strings_match_vllm_decode_of_one_id(source: str, qwen, spm) -> None:
    """Whole-character tokens: vLLM's `decode([id])` (special tokens by their content), with the
    leading space of a SentencePiece piece kept (vLLM restores what decode strips); partial
    tokens: OpenAI's bytes: form of exactly their bytes. Window tokenizers: decode([id])."""
    tok = {"qwen2": qwen, "llama-spm": spm}.get(source) or detok.load_tokenizer(str(gguf_fixture(source)))
    strings = TokenStrings(tok)
    plan = prepare_decoding(tok)
    rng = np.random.default_rng(0)
    ids = sorted(set(rng.integers(0, tok.vocab_size, 800).tolist()) | set(tok.special_ids) | set(tok.encode(TEXT)))
    blob, lengths, raw = strings.gather(np.array(ids, dtype=np.int64))
    texts = detok.wire.split_text(blob, lengths)
    raw_set = set(np.frombuffer(raw, dtype="<u4").tolist())
    for j, i in enumerate(ids):
        text, is_raw = strings.string(i)
        assert texts[j] == text and (j in raw_set) == is_raw
        decoded = tok.decode([i], skip_special_tokens=False)
        if plan.decoding is None:
            assert text == decoded and not is_raw
            continue
        piece = plan.decoding.pieces[i]
        if is_raw:
            assert bytes.fromhex(text[6:].replace("\\x", "")) == piece and "\ufffd" in decoded
        elif plan.decoding.strip_leading_space and piece.startswith(b" "):
            assert text == " " + decoded or text == decoded  # decode drops one leading space
        else:
            assert text == decoded
    assert strings.gather(np.array([tok.vocab_size, -1, 2**31], dtype=np.int64))[0] == b""  # outside: ""


def test_compiled_and_numpy_gathers_give_the_same_bytes(qwen) -> None:
    strings = TokenStrings(qwen)
    if not strings.compiled:
        pytest.skip("the compiled gather is not built")
    rng = np.random.default_rng(1)
    for n in (0, 1, 7, 5000):
        ids = rng.integers(-5, qwen.vocab_size + 5, n).astype(np.int64)
        compiled = strings.gather(ids)
        strings.compiled = False
        assert strings.gather(ids) == compiled
        strings.compiled = True
    from detok._native._tokenstrings import gather

    table = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError):
        gather(np.array([3], dtype=np.int64), table, table, b"")  # id outside the table
    with pytest.raises(ValueError):
        gather(np.array([1], dtype=np.int64), table, np.array([0, 9, 0], dtype=np.int64), b"abc")  # past the buffer
    with pytest.raises(TypeError):
        gather(np.array([0], dtype=np.int32), table, table, b"")


# ---- which tokens get entries -----------------------------------------------------------------
@pytest.mark.parametrize("per_step", [1, 3])
def test_every_token_gets_its_entry_split_characters_included(qwen, core_of, per_step: int) -> None:
    core = core_of(qwen)
    ids = qwen.encode(TEXT)
    col = run_steps(core, 7, ids, k=3, sent=5, per_step=per_step)
    entries = col.ordered(7)
    assert [e.token_id for e in entries] == ids
    strings = TokenStrings.of(qwen)
    for pos, (e, i) in enumerate(zip(entries, ids)):
        assert e.token == strings.string(i)[0]
        lp, top_ids = expected_top(7, pos, i, 3, 5, qwen)
        assert e.logprob == pytest.approx(lp) and [t[0] for t in e.top] == top_ids
        assert [t[1] for t in e.top] == [strings.string(t)[0] for t in top_ids]
    # the bytes of the entries rebuild the text, characters split across tokens included
    assert b"".join(e.data for e in entries).decode() == col.text[7] == qwen.decode(ids)
    assert any(e.token.startswith("bytes:") for e in entries)


def test_byte_fallback_pieces_and_invalid_bytes(spm, core_of) -> None:
    """SentencePiece byte-fallback tokens are named by their byte; an invalid byte (U+FFFD in the
    text) keeps its raw byte, so the bytes decoded as the text's rule gives the text."""
    core = core_of(spm)
    byte_of = {spm.token_to_id(f"<0x{b:02X}>"): b for b in range(256)}
    ids = spm.encode(" 北京 🫨 ok") + [spm.token_to_id("<0x9F>"), *spm.encode(" x"), spm.token_to_id("<0xE5>")]
    col = run_steps(core, 3, ids, k=2, sent=2, per_step=2)
    entries = col.ordered(3)
    for e in entries:
        if e.token_id in byte_of:
            assert e.token == f"bytes:\\x{byte_of[e.token_id]:02x}" and e.data == bytes([byte_of[e.token_id]])
    data = b"".join(e.data for e in entries)
    assert codecs.decode(data, "utf-8", "replace") == " " + col.text[3]  # the stream drops the first space
    assert col.text[3].endswith("\ufffd")  # the incomplete tail at finish


def test_the_stop_string_token_gets_its_entry_and_none_after_it_whatever_the_grouping(qwen, core_of) -> None:
    """Entries end at the token that completes the stop string, whether the tokens after it come
    in the same row (vLLM would give those entries too, so its entries depend on how the tokens
    were grouped into steps), in later steps, or all in one row (as a replay sends them)."""
    ids = qwen.encode("one two three STOP four five six")
    stop_at = next(i for i in range(len(ids)) if "STOP" in qwen.decode(ids[: i + 1]))
    groupings = {
        "single": [[p] for p in range(stop_at + 3)],
        "same row": [[p] for p in range(stop_at)] + [[stop_at, stop_at + 1], [stop_at + 2]],
        "one row": [list(range(stop_at + 3))],
    }
    for name, rows in groupings.items():
        core = core_of(qwen)
        col = EntryCollector()
        col.take(core.handle_batch(lp_batch([], [], [], new=[reg(1, 2, stop=["STOP"])])))
        for row in rows:
            col.take(core.handle_batch(lp_batch(
                [1], [row[0]], [ids[p] for p in row], [len(row)] if len(row) > 1 else None,
                sent_k={1: 2}, vocab=qwen.vocab_size,
            )))
        assert col.finish[1].matched == "STOP", name
        assert [e.token_id for e in col.ordered(1)] == ids[: stop_at + 1], name
        assert "STOP" not in col.text[1]


@pytest.mark.parametrize("hidden", [True, False])
def test_stop_token_gets_its_entry_tokens_after_it_do_not(qwen, core_of, hidden: bool) -> None:
    core = core_of(qwen)
    eos = next(iter(qwen.eos_token_ids))
    ids = qwen.encode("some words")
    stop_id = eos if hidden else qwen.encode("!")[0]
    params = {} if hidden else {"visible_stop_token_ids": (stop_id,)}
    seq = [*ids, stop_id, *qwen.encode(" more")]
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(2, 1, **params)])))
    col.take(core.handle_batch(lp_batch([2], [0], seq, [len(seq)], sent_k={2: 1}, vocab=qwen.vocab_size)))
    assert col.finish[2].matched == stop_id
    entries = col.ordered(2)
    assert [e.token_id for e in entries] == [*ids, stop_id]
    assert entries[-1].token == qwen.decode([stop_id], skip_special_tokens=False)  # EOS by its content
    assert col.text[2] == qwen.decode(ids if hidden else [*ids, stop_id])


def test_only_requests_that_asked_get_entries_and_at_most_their_k(qwen, core_of) -> None:
    core = core_of(qwen)
    ids = qwen.encode(TEXT)[:6]
    col = EntryCollector()
    regs = [reg(1, None), reg(2, 0), reg(3, 2), reg(4, 50), reg(5, -1)]
    col.take(core.handle_batch(lp_batch([], [], [], new=regs)))
    rids = [1, 2, 3, 4, 5, 99]  # 99: never registered
    for p, t in enumerate(ids):
        col.take(core.handle_batch(lp_batch(rids, [p] * 6, [t] * 6, sent_k={r: 20 for r in rids}, vocab=qwen.vocab_size)))
    assert 1 not in col.entries and 5 not in col.entries and 99 not in col.entries
    assert all(e.top == [] for e in col.ordered(2))
    assert all(len(e.top) == 2 for e in col.ordered(3))
    assert all(len(e.top) == MAX_TOP_LOGPROBS for e in col.ordered(4))  # capped
    assert [e.token_id for e in col.ordered(4)] == ids


def test_rows_without_logprob_columns_get_no_entries(qwen, core_of) -> None:
    core = core_of(qwen)
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(1, 3), reg(2, 3)])))
    ids = qwen.encode("a b c")
    for p, t in enumerate(ids):
        out = col.take(core.handle_batch(lp_batch([1, 2], [p, p], [t, t], sent_k={2: 3}, vocab=qwen.vocab_size)))
    assert 1 not in col.entries and len(col.ordered(2)) == len(ids)
    # a step without any logprob column costs nothing on the wire
    out = core.handle_batch(lp_batch([1], [len(ids)], [ids[0]]))
    assert all(b.logprobs is None for _, b in out.deltas)


# ---- replays, gaps, late tokens ---------------------------------------------------------------
def test_replayed_and_overlapping_rows_repeat_entries_with_their_index(qwen, core_of) -> None:
    """A replay re-sends entries with their token index (the receiver drops what it has); the
    entries themselves are identical; a gap finishes the request with no entries for it."""
    core = core_of(qwen)
    ids = qwen.encode("北京欢迎你 🫨 and more text here")
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(1, 2), reg(2, 2)])))
    send = lambda rid, start, n: col.take(core.handle_batch(  # noqa: E731
        lp_batch([rid], [start], ids[start : start + n], [n], sent_k={rid: 2}, vocab=qwen.vocab_size)))
    send(1, 0, 4)
    send(1, 0, 4)  # the same step again
    send(1, 2, 5)  # overlaps: tokens 2-3 again, 4-6 new
    send(1, 7, len(ids) - 7)
    firsts = [run.first for _, rid, run in col.runs if rid == 1]
    assert firsts == [0, 0, 2, 7]
    assert [e.token_id for e in col.ordered(1)] == ids
    send(2, 0, 3)
    send(2, 5, 2)  # tokens 3-4 lost: the request ends with an error, no entries for the gap
    assert col.finish[2].reason == "error"
    assert [e.token_id for e in col.ordered(2)] == ids[:3]
    n_runs = len(col.runs)
    send(2, 3, 2)  # late tokens of a finished request: ignored, no entries
    assert len(col.runs) == n_runs


def test_several_frontends_each_get_their_requests_entries(qwen, core_of) -> None:
    core = core_of(qwen)
    ids = qwen.encode(TEXT)[:12]
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(1, 1, FE), reg(2, 1, FE2), reg(3, None, FE2)])))
    for p in range(0, len(ids), 2):
        col.take(core.handle_batch(
            lp_batch([1, 2, 3], [p] * 3, ids[p : p + 2] * 3, [2, 2, 2], sent_k={1: 1, 2: 1, 3: 1}, vocab=qwen.vocab_size)))
    assert {(fe, rid) for fe, rid, _ in col.runs} == {(FE, 1), (FE2, 2)}
    assert [e.token_id for e in col.ordered(1)] == [e.token_id for e in col.ordered(2)] == ids


# ---- malformed columns --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        StepLogprobs(pack_u32([1]), b"\0" * 4, pack_u32([0]), b"", b""),  # row 1 of a 1-row batch
        StepLogprobs(pack_u32([0]), b"\0" * 8, pack_u32([0]), b"", b""),  # two logprobs for one token
        StepLogprobs(pack_u32([0]), b"\0" * 4, pack_u32([2]), pack_u32([1]), b"\0" * 4),  # top count 2, one id
        StepLogprobs(pack_u32([0]), b"\0" * 4, pack_u32([21]), pack_u32([1] * 21), b"\0" * 84),  # over the cap
        StepLogprobs(b"\0\0", b"", b"", b"", b""),  # not a multiple of 4
        StepLogprobs(pack_u32([0, 0]), b"\0" * 8, pack_u32([0, 0]), b"", b""),  # rows not ascending
    ],
)
def test_malformed_logprob_columns_reject_the_batch_before_any_change(qwen, bad: StepLogprobs) -> None:
    core = WorkerCore(qwen)
    core.handle_batch(lp_batch([], [], [], new=[reg(1, 2)]))
    batch = lp_batch([1], [0], qwen.encode("x"))
    batch.logprobs = bad
    with pytest.raises(MalformedBatch):
        core.handle_batch(batch)
    assert core._progress(1) == 0  # nothing consumed
    out = core.handle_batch(lp_batch([1], [0], qwen.encode("x"), sent_k={1: 2}, vocab=qwen.vocab_size))
    assert [b.logprobs is not None for _, b in out.deltas] == [True]


def test_alternatives_outside_the_vocabulary_are_empty_strings(qwen) -> None:
    core = WorkerCore(qwen)
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(1, 2)])))
    batch = lp_batch([1], [0], qwen.encode("x"))
    batch.logprobs = StepLogprobs(pack_u32([0]), np.float32([-0.1]).tobytes(), pack_u32([2]),
                                  pack_u32([2**32 - 1, qwen.vocab_size]), np.float32([-1, -2]).tobytes())
    col.take(core.handle_batch(batch))
    [entry] = col.ordered(1)
    assert [t[1] for t in entry.top] == ["", ""]


# ---- property: entries whatever the grouping ----------------------------------------------------
@pytest.fixture(scope="module")
def cores(qwen) -> dict[bool, WorkerCore]:
    numpy_core = WorkerCore(qwen)
    numpy_core.table.compiled = False
    return {True: WorkerCore(qwen), False: numpy_core}


_rids = iter(range(1000, 10**9))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_entries_do_not_depend_on_grouping_and_bytes_give_the_text(qwen, cores, data) -> None:
    rng_ids = data.draw(st.lists(st.integers(0, 151642), min_size=1, max_size=40), label="ids")
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=len(rng_ids), max_size=len(rng_ids)), label="steps")
    k = data.draw(st.integers(0, 5), label="k")
    core = cores[data.draw(st.booleans(), label="compiled")]
    rid = next(_rids)
    col = EntryCollector()
    col.take(core.handle_batch(lp_batch([], [], [], new=[reg(rid, k)])))
    p = 0
    for n in sizes:
        if p >= len(rng_ids):
            break
        chunk = rng_ids[p : p + n]
        col.take(core.handle_batch(lp_batch([rid], [p], chunk, [len(chunk)], sent_k={rid: 5}, vocab=qwen.vocab_size)))
        p += len(chunk)
    col.take(core.handle_batch(lp_batch([], [], [], ends=[EndRequest(rid, "length")])))
    entries = col.ordered(rid)
    assert [e.token_id for e in entries] == rng_ids and all(len(e.top) == k for e in entries)
    specials = qwen.special_ids
    data_bytes = b"".join(e.data for e in entries if e.token_id not in specials)
    assert codecs.decode(data_bytes, "utf-8", "replace") == col.text.get(rid, "")
