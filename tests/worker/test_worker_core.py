"""The worker's batch processing in-process (no sockets): text against the oracle and an
in-process DecodeStream, stops and notices, every bad-input path of docs/reliability.md."""

from __future__ import annotations

import random

import pytest

import detok
from detok.wire.packing import pack_rids, pack_u32
from detok.wire.to_workers import DetokBatch, EndRequest, FailRequests, Registration
from detok.stream import DecodeStream
from detok.wire.params import DecodeParams
from detok.worker.core import MalformedBatch, Outputs, WorkerCore
import tests.helpers.stream_roster as stream_roster
from tests.helpers.tokenizers_available import corpus_text

FE = "ipc:///tmp/detok-test/fe0"
FE2 = "ipc:///tmp/detok-test/fe1"
MIXED = "Hello, world! 北京欢迎你 🫨👍🏽 def f(x):\n    return x ** 2\nÀ la carte — «quotes» नमस्ते. "


@pytest.fixture(scope="module")
def tok() -> detok.Tokenizer:
    return stream_roster.get("qwen2")  # (shared by the process's tests: one load and decode plan)


def batch(
    rids: list[int],
    starts: list[int],
    tokens: list[int],
    counts: list[int] | None = None,
    new: list[Registration] | None = None,
    ends: list[EndRequest] | None = None,
) -> DetokBatch:
    return DetokBatch(
        0, 0.0, new or [], pack_rids(rids), pack_u32(starts), pack_u32(counts) if counts is not None else b"",
        pack_u32(tokens), ends or [],
    )


class Collector:
    """Concatenates what a core emits, per rid, checking offsets as a receiver would."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}
        self.finish: dict[int, object] = {}
        self.num_tokens: dict[int, int] = {}
        self.dest: dict[int, set[str]] = {}
        self.notices: list = []

    def take(self, out: Outputs) -> Outputs:
        for reply_to, b in out.deltas:
            assert len(b.rids) // 8 == len(b.texts()) == len(b.lengths) // 4 == len(b.offsets) // 4
            for rid, text, offset in b.rows():
                if not text:
                    continue  # empty rows carry nothing
                assert offset == len(self.text.get(rid, "")), "char offsets must be contiguous"
                assert rid not in self.finish, "no text after a finish"
                self.text[rid] = self.text.get(rid, "") + text
                self.dest.setdefault(rid, set()).add(reply_to)
            for done in b.finished:
                assert done.rid not in self.finish, "one finish per rid"
                self.finish[done.rid] = done.finish
                self.num_tokens[done.rid] = done.num_tokens
                self.dest.setdefault(done.rid, set()).add(reply_to)
        if out.notice is not None:
            self.notices.append(out.notice)
        return out


def reference(tok, context: list[int], outputs: list[int], params: DecodeParams | None = None) -> str:
    stream = DecodeStream(tok, context, params or DecodeParams())
    text = "".join(stream.step([t]).text for t in outputs)
    return text + stream.finish("length").text


def workload(tok, n: int, length: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    text = corpus_text() + MIXED * 50
    ids = tok.encode(text)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start = rng.randrange(0, len(ids) - length - 5)
        out.append((ids[start : start + 5], ids[start + 5 : start + 5 + length]))
    return out


def test_single_token_steps_match_the_oracle_and_a_local_stream(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    work = workload(tok, 64, 40)
    regs = [Registration(rid, FE, ctx, DecodeParams()) for rid, (ctx, _) in enumerate(work)]
    got.take(core.handle_batch(batch([], [], [], new=regs)))
    for j in range(40):
        rids = list(range(len(work)))
        got.take(core.handle_batch(batch(rids, [j] * len(rids), [work[r][1][j] for r in rids])))
    got.take(core.handle_batch(batch([], [], [], ends=[EndRequest(r, "length") for r in range(len(work))])))
    checked_with_decode = 0
    for rid, (ctx, out) in enumerate(work):
        assert got.text[rid] == reference(tok, ctx, out)
        full, head = tok.decode(ctx + out), tok.decode(ctx)
        if "\ufffd" not in full and full.startswith(head):  # cut points on whole characters
            assert got.text[rid] == full[len(head) :]
            checked_with_decode += 1
        assert got.finish[rid].reason == "length"
        assert got.num_tokens[rid] == 40
    assert checked_with_decode > 40
    assert not core.live


def test_multi_token_steps_give_the_same_text(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    work = workload(tok, 32, 60, seed=1)
    rng = random.Random(2)
    got.take(core.handle_batch(batch([], [], [], new=[Registration(r, FE, c, DecodeParams()) for r, (c, _) in enumerate(work)])))
    pos = [0] * len(work)
    while any(p < 60 for p in pos):
        rids, starts, counts, tokens = [], [], [], []
        for r in range(len(work)):
            if pos[r] < 60:
                k = min(rng.randint(1, 5), 60 - pos[r])  # speculative decoding: several per rid
                rids.append(r), starts.append(pos[r]), counts.append(k)
                tokens.extend(work[r][1][pos[r] : pos[r] + k])
                pos[r] += k
        got.take(core.handle_batch(batch(rids, starts, tokens, counts)))
    got.take(core.handle_batch(batch([], [], [], ends=[EndRequest(r, "length") for r in range(len(work))])))
    for rid, (ctx, out) in enumerate(work):
        assert got.text[rid] == reference(tok, ctx, out)


def test_stop_string_finishes_notifies_and_ignores_later_tokens(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    ids = tok.encode(" one two three STOP four five")
    params = DecodeParams(stop=("STOP",))
    got.take(core.handle_batch(batch([], [], [], new=[Registration(1, FE, [], params), Registration(2, FE, [], DecodeParams())])))
    for j, t in enumerate(ids):
        got.take(core.handle_batch(batch([1, 2], [j, j], [t, t])))
    assert got.text[1] == " one two three "
    assert got.finish[1].reason == "stop" and got.finish[1].matched == "STOP"
    assert [n.rids for n in got.notices] == [[1]]
    assert got.notices[0].finishes[0].matched == "STOP"
    assert core.counts.late_tokens > 0  # tokens after the stop were dropped quietly
    assert core.counts.stops == {"string": 1}
    assert 1 not in core.live and 2 in core.live
    assert got.text[2] == tok.decode(ids)


def test_scheduler_ends_and_aborts(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    ids = tok.encode(" abc def")
    got.take(core.handle_batch(batch([], [], [], new=[Registration(r, FE, [], DecodeParams()) for r in (1, 2, 3)])))
    got.take(core.handle_batch(batch([1, 2, 3], [0, 0, 0], [ids[0]] * 3, ends=[EndRequest(1, "stop", 151643), EndRequest(2, "abort")])))
    assert got.finish[1].reason == "stop" and got.finish[1].matched == 151643
    assert got.finish[2].reason == "abort"
    assert got.num_tokens[1] == 1
    assert 3 in core.live and 1 not in core.live
    assert got.notices == []  # scheduler-side ends are not echoed back


def test_unknown_rid_is_reported_to_the_scheduler_once(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([77], [0], [100])))
    got.take(core.handle_batch(batch([77], [1], [101])))
    assert [n.unknown_rids for n in got.notices] == [[77]]
    assert got.text == {} and got.finish == {}
    assert core.counts.unknown_rids == 1


def test_duplicate_registrations(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    reg = Registration(5, FE, [1, 2], DecodeParams())
    got.take(core.handle_batch(batch([], [], [], new=[reg])))
    got.take(core.handle_batch(batch([5], [0], [100], new=[reg])))  # identical: a replay, ignored
    assert 5 in core.live and core.counts.duplicate_registrations == 1
    assert 5 not in got.finish
    other = Registration(5, FE2, [1, 2], DecodeParams(stop=("x",)))
    got.take(core.handle_batch(batch([], [], [], new=[other])))  # conflicting: an error
    assert got.finish[5].reason == "error" and "duplicate" in got.finish[5].message
    assert got.dest[5] == {FE}  # told to the frontend that owns the live request
    assert 5 not in core.live


def test_out_of_vocabulary_id_ends_only_that_request(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(r, FE, [], DecodeParams()) for r in (1, 2)])))
    bad = tok.vocab_size + 10
    got.take(core.handle_batch(batch([1, 2], [0, 0], [bad, 9707])))
    assert got.finish[1].reason == "error" and str(bad) in got.finish[1].message
    assert got.notices[0].rids == [1]
    assert core.counts.invalid_token_ids == 1
    assert 2 in core.live and got.text[2] == tok.decode([9707])


def test_replayed_tokens_are_skipped_and_a_gap_is_an_error(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    ids = tok.encode(" alpha beta gamma delta")
    got.take(core.handle_batch(batch([], [], [], new=[Registration(1, FE, [], DecodeParams()), Registration(2, FE, [], DecodeParams())])))
    got.take(core.handle_batch(batch([1], [0], ids[:2], counts=[2])))
    got.take(core.handle_batch(batch([1], [0], ids[:3], counts=[3])))  # replay from 0: only ids[2] is new
    got.take(core.handle_batch(batch([1], [1], ids[1:2])))  # fully replayed: nothing
    assert got.text[1] == tok.decode(ids[:3])
    got.take(core.handle_batch(batch([2], [4], ids[:1])))  # tokens 0..3 never came
    assert got.finish[2].reason == "error" and "missing" in got.finish[2].message
    assert got.notices[-1].rids == [2]  # the scheduler is told too


def test_idle_requests_finish_with_an_error_and_live_ones_stay(tok) -> None:
    core, got = WorkerCore(tok, idle_timeout_s=10.0), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(r, FE, [], DecodeParams()) for r in (1, 2)]), now=0.0))
    got.take(core.sweep_idle(now=1.0))
    got.take(core.handle_batch(batch([2], [0], [9707]), now=8.0))
    got.take(core.sweep_idle(now=9.0))  # rid 2 progressed: its idle clock restarts
    got.take(core.sweep_idle(now=12.0))
    assert got.finish[1].reason == "error" and "idle timeout" in got.finish[1].message
    assert 2 in core.live and 2 not in got.finish
    assert [n.rids for n in got.notices] == [[1]]
    got.take(core.sweep_idle(now=25.0))
    assert "idle" in got.finish[2].message
    assert core.counts.idle_timeouts == 2 and not core.live


@pytest.mark.parametrize(
    "bad",
    [
        {"rids": pack_rids([1, 2]), "starts": pack_u32([0]), "tokens": pack_u32([1, 2])},
        {"rids": pack_rids([1]), "starts": pack_u32([0]), "tokens": pack_u32([1, 2])},
        {"rids": pack_rids([1]), "starts": pack_u32([0]), "tokens": pack_u32([1, 2]), "counts": pack_u32([3])},
        {"rids": b"\x01\x02\x03", "starts": b"", "tokens": b""},
    ],
)
def test_malformed_batches_are_rejected_before_any_change(tok, bad: dict) -> None:
    core = WorkerCore(tok)
    reg = Registration(1, FE, [], DecodeParams())
    msg = DetokBatch(0, 0.0, [reg], bad["rids"], bad["starts"], bad.get("counts", b""), bad["tokens"], [])
    with pytest.raises(MalformedBatch):
        core.handle_batch(msg)
    assert not core.live


def test_fail_requests_reach_the_given_frontend_even_for_unknown_rids(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    got.take(core.handle_batch(batch([], [], [], new=[Registration(1, FE, [], DecodeParams())])))
    got.take(core.handle_fail(FailRequests([1, 99], [FE, FE2], "detok worker 0 died: killed by SIGKILL")))
    assert got.finish[1].reason == got.finish[99].reason == "error"
    assert "SIGKILL" in got.finish[99].message
    assert got.dest[99] == {FE2} and got.dest[1] == {FE}
    assert not core.live


def test_deltas_are_routed_to_each_requests_frontend(tok) -> None:
    core = WorkerCore(tok)
    ids = tok.encode(" x y")
    regs = [Registration(1, FE, [], DecodeParams()), Registration(2, FE2, [], DecodeParams()), Registration(3, FE, [], DecodeParams())]
    core.handle_batch(batch([], [], [], new=regs))
    out = core.handle_batch(batch([1, 2, 3], [0, 0, 0], [ids[0]] * 3))
    by_dest = {reply_to: [rid for rid, _, _ in b.rows()] for reply_to, b in out.deltas}
    assert by_dest == {FE: [1, 3], FE2: [2]}


def test_several_frontends_get_exactly_their_requests_text(tok) -> None:
    """Requests of three frontends interleaved in every step (the numpy-routed path), stop strings
    finishing some mid-stream, rows of unknown rids mixed in: each frontend receives exactly its
    own requests' text, and only theirs."""
    core, got = WorkerCore(tok), Collector()
    work = workload(tok, 48, 30, seed=3)
    frontends = [FE, FE2, "ipc:///tmp/detok-test-fe3"]
    owner = {rid: frontends[rid % 3] for rid in range(len(work))}
    stops = {rid: DecodeParams(stop=[tok.decode(out[10:12])]) if rid % 4 == 0 else DecodeParams() for rid, (_, out) in enumerate(work)}
    regs = [Registration(rid, owner[rid], ctx, stops[rid]) for rid, (ctx, _) in enumerate(work)]
    got.take(core.handle_batch(batch([], [], [], new=regs)))
    stopped: set[int] = set()
    for j in range(30):
        rids = [r for r in range(len(work)) if r not in stopped] + [900 + j]  # one unknown rid per step
        out = core.handle_batch(batch(rids, [j] * len(rids), [work[r][1][j] if r < 900 else 0 for r in rids]))
        for reply_to, deltas in out.deltas:
            assert {rid for rid, text, _ in deltas.rows() if text} <= {r for r, fe in owner.items() if fe == reply_to}
        if out.notice is not None:
            stopped |= {r for r in out.notice.rids if r < 900}
        got.take(out)
    got.take(core.handle_batch(batch([], [], [], ends=[EndRequest(r, "length") for r in range(len(work)) if r not in stopped])))
    for rid, (ctx, out) in enumerate(work):
        assert got.dest[rid] == {owner[rid]}
        want = reference(tok, ctx, out, stops[rid])
        assert got.text.get(rid, "") == want, rid
    assert any(got.finish[r].reason == "stop" for r in stopped)


def test_finish_all_on_shutdown(tok) -> None:
    core, got = WorkerCore(tok), Collector()
    core.handle_batch(batch([], [], [], new=[Registration(r, FE, [], DecodeParams()) for r in range(5)]))
    got.take(core.finish_all("detok worker 0 shut down (SIGTERM)"))
    assert len(got.finish) == 5 and all(f.reason == "error" for f in got.finish.values())
    assert sorted(got.notices[0].rids) == list(range(5))


def test_a_batch_asks_once_per_frontend_and_a_refused_one_fails_only_its_requests(tok) -> None:
    """Registrations are admitted per frontend once per batch (a batch's registrations mostly
    share one): every request of a refused frontend fails with its reason, told to the scheduler
    only, and the other frontend's requests stream; a later batch asks again."""
    asked: list[str] = []

    def admit(endpoint: str) -> str | None:
        asked.append(endpoint)
        return "frontend unreachable" if endpoint == FE2 else None

    core, got = WorkerCore(tok, admit_reply_to=admit), Collector()
    ids = tok.encode(" one two")
    regs = [Registration(r, FE if r % 2 else FE2, [], DecodeParams()) for r in range(1, 7)]
    got.take(core.handle_batch(batch([1, 3, 5], [0, 0, 0], [ids[0]] * 3, new=regs)))
    assert sorted(asked) == [FE, FE2]
    assert sorted(core.live) == [1, 3, 5] and got.text == {1: " one", 3: " one", 5: " one"}
    (notice,) = got.notices
    assert sorted(notice.rids) == [2, 4, 6] and {f.message for f in notice.finishes} == {"frontend unreachable"}
    assert got.finish == {}  # (a refused frontend is not sent anything)
    got.take(core.handle_batch(batch([], [], [], new=[Registration(8, FE2, [], DecodeParams())])))
    assert asked.count(FE2) == 2 and 8 not in core.live
